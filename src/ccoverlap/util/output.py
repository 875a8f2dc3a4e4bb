"""Terminal and JSON output shared by the subcommands."""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table

from ccoverlap.util.errors import UsageError
from ccoverlap.util.text import shorten


class QuietConsole(Console):
    """A rich Console that leaves a closed pipe (`| head`) to main(), which ends quietly with
    141 for every command (rich alone would exit 1 from inside the print)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def comma_list(text: str) -> tuple[str, ...]:
    """argparse type for 'a,b,c' options."""
    return tuple(v.strip() for v in text.split(",") if v.strip())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once, at import: setting it is process-wide


def write_json(path: str | Path, obj, indent: int | None = None) -> Path:
    """Write `obj` as JSON so that a reader never sees half a file: through a temporary file of its own beside
    it (each writer its own name: concurrent writers each replace it whole, the last one wins), renamed over
    it; whatever goes wrong (a full disk, a signal) takes the temporary file with it. A path that exists and is
    no regular file (/dev/null, /dev/stdout, a FIFO) is written in place: a rename would replace the device.
    `indent`: for files people edit."""
    path = Path(path)
    if path.exists() and not path.is_file() and not path.is_dir():
        with path.open("w") as f:
            json.dump(obj, f, default=str, indent=indent)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # as open() would have made it, not mkstemp's 0600
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, default=str, indent=indent)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def check_distinct(outputs: dict[str, str | Path | None]) -> None:
    """Refuse before any work two outputs on one path (flag -> path; None: not written): the second would
    replace the first. One line naming both flags, exit 2."""
    seen: dict[str, str] = {}
    for flag, path in outputs.items():
        if path is None:
            continue
        real = os.path.realpath(path)
        if real in seen:
            raise UsageError(f"{seen[real]} and {flag} are both {path}: give each its own file")
        seen[real] = flag


def check_writable(path: str | Path, flag: str, directory: bool = False) -> None:
    """Refuse before any work a file (or, with `directory`, a folder) that could not be written:
    one line, exit 2. Missing folders are fine where the nearest existing one takes new files."""
    path = Path(path).absolute()
    if path.exists() and path.is_dir() != directory:
        raise UsageError(f"{flag} {path}: is a {'file' if directory else 'directory'}")
    if path.exists() and not directory and not path.is_file():  # a device or a FIFO: written in place
        if not os.access(path, os.W_OK):
            raise UsageError(f"{flag} {path}: not writable")
        return
    base = next(p for p in ((path,) if directory else ()) + tuple(path.parents) if p.exists())
    if not base.is_dir():
        raise UsageError(f"{flag} {path}: {base} is a file, not a directory")
    try:
        tempfile.TemporaryFile(dir=base).close()
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write in {base} ({exc.strerror or exc})") from None


def unwritable(folder: str | Path, room: int = 4096) -> str | None:
    """Why `room` bytes (a record's few lines) cannot be written in `folder` now (a full disk, a quota, a
    file-size limit), or None."""
    try:
        with tempfile.TemporaryFile(dir=folder) as f:
            f.write(bytes(room))
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def check_new_folder(path: str | Path, flag: str) -> Path:
    """`path`, absolute, where it is a folder that is new or empty and writable; else one line, exit 2."""
    path = Path(path).absolute()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"{flag} {path}: {'holds files already' if path.is_dir() else 'is a file'}; "
                         "give a new or empty folder")
    check_writable(path, flag, directory=True)
    return path


def print_json(obj) -> None:
    """`obj` as indented JSON, made in one call (orjson: an analysis of many ranks is hundreds of thousands of
    values, which json.dump writes one by one) and written in 8 KiB pieces; json where orjson refuses a value
    (an integer beyond 64 bits)."""
    try:
        text = orjson.dumps(obj, default=str, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
                            | orjson.OPT_PASSTHROUGH_DATACLASS).decode()
    except TypeError:
        text = json.dumps(obj, indent=2, default=str)
    text += "\n"
    for at in range(0, len(text), 8192):  # a reader that leaves mid-write ends one piece short: the next one says so
        sys.stdout.write(text[at:at + 8192])
        sys.stdout.flush()


#: the width of a table printed to a log or a pipe (a terminal's own width otherwise): what a person reads
TABLE_WIDTH = 80
#: a cell's pieces: what may end a line is a space, a '+' (strategies are lever+lever) or the hyphen of a
#: hyphenated word (nccl-cta-policy), never one inside a number or a range of numbers (49.25-51.19)
_PIECE = re.compile(r"(\S*?(?:\+|(?<=[A-Za-z])-(?=[A-Za-z]))|\S+)(\s*)")


def _pieces(text: str) -> list[tuple[str, str]]:
    return _PIECE.findall(text) or [("", "")]


def _wrap(text: str, width: int) -> str:
    """`text` in lines of at most `width` characters, broken where _PIECE allows, never inside a word."""
    lines, line = [], ""
    for piece, space in _pieces(text):
        if line and len(line) + len(piece) > width:
            lines.append(line.rstrip())
            line = ""
        line += piece + (" " if space else "")
    return "\n".join([*lines, line.rstrip()])


def _widths(cells: list[list[str]], room: int) -> list[int]:
    """Each column's width: as wide as its widest cell where the table fits in `room`, else every column at
    least its longest piece and the rest shared in proportion to what each would still like."""
    natural = [max(len(c) for c in col) for col in zip(*cells)]
    least = [max(len(p) for c in col for p, _ in _pieces(c)) for col in zip(*cells)]
    spare = room - sum(least)
    if sum(natural) <= room or spare <= 0:
        return natural if sum(natural) <= room else least
    want = [n - m for n, m in zip(natural, least)]
    return [m + spare * w // sum(want) for m, w in zip(least, want)]


def print_table(title: str, columns: list[str], rows: list[list], caption: str | None = None) -> None:
    """A table as wide as the terminal, or TABLE_WIDTH in a log or a pipe: where it would be wider, its cells
    wrap at spaces (after a '+', at a word's hyphen), never inside a number or a word."""
    width = QuietConsole().width if QuietConsole().is_terminal else TABLE_WIDTH
    cells = [list(columns), *([str(v) for v in row] for row in rows)]
    least = sum(max(len(p) for c in col for p, _ in _pieces(c)) for col in zip(*cells))
    pad = 1 if least + 3 * len(columns) - 1 <= width else 0  # too many columns for spaces around each: none
    frame = (2 * pad + 1) * len(columns) - 1  # the spaces each side of every column, a line between two
    widths = _widths(cells, width - frame)
    table = Table(title=title, caption=caption, title_justify="left", show_edge=False, padding=(0, pad))
    for i, (col, w) in enumerate(zip(columns, widths)):
        table.add_column(_wrap(col, w), justify="left" if i == 0 else "right", no_wrap=True, width=w)
    for row in cells[1:]:
        table.add_row(*(_wrap(c, w) for c, w in zip(row, widths)))
    QuietConsole(width=max(width, sum(widths) + frame)).print(table)  # wider only where a word needs it


class Progress:
    """A long run's progress on stderr, `total` steps: on a terminal a bar labelled with what runs now; in a log
    or a pipe a line as a step ends, at most one per LINE_EVERY_S (and the last, once there was one), with the
    time so far and the whole run's estimate (the mean step so far, times the steps), so a log of a long run
    shows where it is and how long it has to go, and a short run's stays quiet."""

    LINE_EVERY_S = 10.0

    def __init__(self, what: str, total: int):
        self.what, self.total, self.done = what, total, 0
        self.console = QuietConsole(stderr=True)
        self.started = self.said = time.monotonic()
        self.lines = 0  # printed so far (off a terminal)
        self.bar = None

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            from rich.progress import Progress as Bar

            self.bar = Bar(console=self.console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=self.total)
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()

    def running(self, label: str) -> None:
        """What runs now (the bar's label)."""
        if self.bar is not None:
            self.bar.update(self.task, description=f"{self.what}: {label}")

    def advance(self, label: str, steps: int = 1) -> None:
        """`steps` more done, the last of them `label`."""
        self.set(self.done + steps, label)

    def set(self, done: int, label: str = "") -> None:
        """`done` steps done so far, the last of them `label`."""
        self.done = done
        if self.bar is not None:
            self.bar.update(self.task, completed=done, description=f"{self.what}: {label}" if label else self.what)
            return
        now = time.monotonic()
        if now - self.said >= self.LINE_EVERY_S or (done >= self.total and self.lines):
            self.said, self.lines = now, self.lines + 1
            elapsed = now - self.started
            whole = f" of ~{elapsed / done * self.total:.0f} s" if 0 < done < self.total else ""
            self.console.print(f"{self.what}: {done}/{self.total} done ({elapsed:.0f} s{whole})"
                               + (f", last {shorten(label, 60)}" if label else ""), markup=False, highlight=False)


def print_text(text: str) -> None:
    QuietConsole(highlight=False, soft_wrap=True).print(text, markup=False)


def warn(text: str) -> None:
    """One line on stderr that does not change the exit code."""
    QuietConsole(stderr=True, highlight=False, soft_wrap=True).print(f"warning: {text}", markup=False)
