"""Terminal, file and JSON output shared by the subcommands: the one output path.

A command checks each file it will write before any work, then writes it through open_output (or
write_json / write_text / write_bytes; a new folder whole: open_folder), which never leaves half a file and never
replaces a device::

    from ccoverlap.util.output import check_outputs, write_json, write_text

    check_outputs({"--json": cfg.json, "--perfetto": cfg.perfetto}, inputs=(cfg.dir,), force=cfg.force)
    ...                                   # the work
    write_json(cfg.json, doc, schema=True)  # "-": standard output; a document gets its "schema" field
    write_text(cfg.perfetto, text)

check_outputs refuses (UsageError: one line, exit 2) a target that is an input, a read-only file without
--force, a socket; a failure while writing is an OutputError (one line naming the path and the errno,
exit 1), standard output's too (main() guards it).
"""
from __future__ import annotations

import contextlib
import errno
import functools
import io
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import orjson

from ccoverlap.util.errors import UsageError
from ccoverlap.util.text import shorten


@functools.cache
def _quiet_class() -> type:
    from rich.console import Console

    class QuietConsole(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

    return QuietConsole


def _quiet(**kwargs):
    """A rich Console that leaves a closed pipe (`| head`) to main(), which ends quietly with
    141 for every command (rich alone would exit 1 from inside the print). rich is imported on first use: a
    command that prints no table and no bar (`analyze --json -`) never imports it (about 20 ms of its start)."""
    return _quiet_class()(**kwargs)


def _not_a_terminal(stream) -> bool:
    """True where rich's Console would surely find `stream` no terminal (its own test, short of the environment
    variables that force it either way, where rich decides): no bar, no rich needed."""
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return isatty is None or not isatty()
    except ValueError:
        return True


def comma_list(text: str) -> tuple[str, ...]:
    """argparse type for 'a,b,c' options."""
    return tuple(v.strip() for v in text.split(",") if v.strip())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once, at import: setting it is process-wide

#: the name of standard output wherever a command takes a file to write (`--json -`)
STDOUT = "-"
#: how an OutputError names standard output (main() points it at the null device before its one line)
STDOUT_NAME = "standard output"
#: the version of every JSON document a command writes (its "schema" field): raised when a field changes meaning
#: (2: whatif's `step_us` and `interval` are anchored to the measured step, `simulated_step_us` the simulator's own)
SCHEMA = 2


class OutputError(OSError):
    """A file, or standard output, that could not be written (a full disk, a closed pipe, a path gone):
    the CLI prints its one line, naming the path and the errno, and exits 1."""

    def __init__(self, path: str | Path, exc: OSError):
        super().__init__(exc.errno, exc.strerror or str(exc))
        self.path = str(path)

    def __str__(self) -> str:
        name = errno.errorcode.get(self.errno, "?") if self.errno else "?"
        return f"cannot write {self.path}: [Errno {self.errno}] {self.strerror} ({name})"


def _special(path: Path) -> int | None:
    """The mode of `path` where it exists and is no regular file (a device, a FIFO, a socket, a folder)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else mode


def in_place(path: str | Path) -> bool:
    """Whether `path` is written where it is, never replaced: standard output, a character device
    (/dev/null, a terminal) or a FIFO. Nothing is written beside such a target (no chart, no `_files/`)."""
    mode = None if str(path) == STDOUT else _special(Path(path))
    return str(path) == STDOUT or (mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)))


def beside(path: str | Path | None, suffix: str) -> Path | None:
    """The file a command writes beside an output (its chart: `suffix` ".png"); None where there is no output
    or it is written in place (standard output, a device, a FIFO: nothing is made in /dev)."""
    return None if not path or in_place(path) else Path(path).with_suffix(suffix)  # '': check_output refuses it


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep) or b.startswith(a.rstrip(os.sep) + os.sep)


def check_output(path: str | Path, flag: str, *, inputs: tuple = (), force: bool = False,
                 directory: bool = False) -> Path | str:
    """Refuse, before any work, a target a command must not write (one line, exit 2), and return it: an
    input of the same command, a file inside an input folder, a folder holding an input (`inputs`: its
    files and folders); a folder where a file is meant (or the reverse); a socket or a block device (a
    character device or a FIFO is written in place, never replaced); a read-only file unless `force`; a
    place where no file can be made. `-` (standard output) passes where a file is meant."""
    if str(path) == STDOUT and not directory:
        return STDOUT
    if not str(path):
        raise UsageError(f"{flag} '': give a path")
    path = Path(path).absolute()
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):  # to be made (a file on the way: said below)
        if directory and os.path.islink(path):  # a link to nothing: no folder can be made where it is
            raise UsageError(f"{flag} {path}: a symbolic link to {os.readlink(path)}, which does not exist") from None
    except OSError as exc:  # a symbolic link loop, a name too long: no file can be made there either
        raise UsageError(f"{flag} {path}: {exc.strerror}") from None
    real = os.path.realpath(path)
    for given in inputs:
        if given is not None and _overlaps(real, os.path.realpath(given)):
            raise UsageError(f"{flag} {path}: is (or holds, or lies in) the input {given}; give a path outside it")
    mode = _special(path)
    if mode is not None:
        if stat.S_ISDIR(mode) != directory:
            raise UsageError(f"{flag} {path}: is a {'file' if directory else 'directory'}")
        if not directory and not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            raise UsageError(f"{flag} {path}: is neither a regular file, a character device nor a FIFO")
        if not directory and not os.access(path, os.W_OK):
            raise UsageError(f"{flag} {path}: not writable")
        if not directory:
            return path
    elif path.exists() and not force and (not os.access(path, os.W_OK) or not path.stat().st_mode & 0o222):
        raise UsageError(f"{flag} {path}: read-only; --force replaces it")
    base = next(p for p in ((path,) if directory else ()) + tuple(path.parents) if p.exists())
    if not base.is_dir():
        raise UsageError(f"{flag} {path}: {base} is a file, not a directory")
    try:
        tempfile.TemporaryFile(dir=base).close()
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write in {base} ({exc.strerror or exc})") from None
    return path


def check_outputs(files: dict[str, str | Path | None], folders: dict[str, str | Path | None] | None = None, *,
                  inputs: tuple = (), force: bool = False) -> None:
    """check_output for each file and folder a command writes (flag -> path; None: not written), then
    check_distinct on them all."""
    folders = folders or {}
    for targets, directory in ((files, False), (folders, True)):
        for flag, path in targets.items():
            if path is not None:
                check_output(path, flag, inputs=inputs, force=force, directory=directory)
    check_distinct({f: p for f, p in (files | folders).items() if p != STDOUT})


class _Closed(io.TextIOBase):
    """Standard output closed before the command started (`>&-`: Python's sys.stdout is None): a write fails as on
    a closed file descriptor, so it is the same one line as a full device, not an AttributeError."""

    def write(self, text):
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))


class _Guarded:
    """Standard output whose failures (a full device, a closed pipe, a closed descriptor) are OutputErrors
    naming it."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise OutputError(STDOUT_NAME, exc) from None

    def flush(self):
        try:
            self._stream.flush()
        except OSError as exc:
            raise OutputError(STDOUT_NAME, exc) from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_stdout():
    """While a command runs: every write to standard output that fails is an OutputError (main() prints it)."""
    real = sys.stdout
    sys.stdout = _Guarded(_Closed() if real is None else real)
    try:
        yield
    finally:
        sys.stdout = real


_json_stream = None  # with `--json -`: standard output as it was, for the JSON alone (json_on_stdout)


@contextlib.contextmanager
def json_on_stdout(on: bool = True):
    """With `--json -`: standard output holds the JSON alone; whatever else the command prints, and any
    program it runs (file descriptor 1), goes to standard error meanwhile."""
    global _json_stream
    if not on:
        yield
        return
    real = sys.stdout
    real.flush()
    try:
        fd, err = real.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # not files (a test's capture): the streams alone are moved
        fd = None
    saved = None if fd is None else os.dup(fd)
    if saved is not None:
        os.dup2(err, fd)
    _json_stream = real if saved is None else _Guarded(os.fdopen(saved, "w", closefd=False))
    sys.stdout = sys.stderr if saved is None else real
    try:
        yield
    finally:
        _json_stream = None
        sys.stdout = real
        if saved is not None:
            with contextlib.suppress(OSError):
                sys.stdout.flush()
            os.dup2(saved, fd)
            os.close(saved)


@contextlib.contextmanager
def open_output(path: str | Path, binary: bool = False) -> Iterator[IO]:
    """The one way a command writes a file: `with open_output(path) as f: f.write(...)`.

    `-` is standard output; a character device or a FIFO is written in place (never replaced); anything
    else goes to a temporary file of its own beside the target (each writer its own name: concurrent
    writers each replace it whole, the last one wins), renamed over it at the end, so a reader never sees
    half a file and a failure (a full disk, a signal) leaves the previous file, or none. Every OSError is an
    OutputError naming the path (main(): one line, exit 1). Check the target first with check_output.
    """
    if str(path) == STDOUT:
        stream = _json_stream or sys.stdout
        stream = stream.buffer if binary and hasattr(stream, "buffer") else stream
        try:
            yield stream
            stream.flush()
        except OutputError:
            raise
        except OSError as exc:
            raise OutputError(STDOUT_NAME, exc) from None
        return
    path = Path(path)
    mode = "wb" if binary else "w"
    if in_place(path):
        try:
            with path.open(mode) as f:
                yield f
        except OSError as exc:
            raise OutputError(path, exc) from None
        return
    if _special(path) is not None:  # a folder, a socket, a block device: never replaced
        raise OutputError(path, IsADirectoryError(errno.EISDIR, "not a regular file") if path.is_dir()
                          else OSError(errno.EINVAL, "not a regular file"))
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, 0o666 & ~_UMASK)  # as open() would have made it, not mkstemp's 0600
        with os.fdopen(fd, mode) as f:
            yield f
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise OutputError(path, exc) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


@contextlib.contextmanager
def open_folder(path: str | Path) -> Iterator[Path]:
    """The one way a command writes a folder whole (`with open_folder(path) as tmp:` then files into tmp): a
    temporary folder beside it, renamed onto it at the end (over an empty one, as check_new_folder allows), so a
    failure (a full disk, a signal) leaves none, or the empty one as it was, never half of it. Every OSError is
    an OutputError naming the path (main(): one line, exit 1). Check the target first with check_new_folder."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        tmp.chmod(0o777 & ~_UMASK)  # as mkdir would have made it, not mkdtemp's 0700
        yield tmp
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise OutputError(path, exc) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def write_bytes(path: str | Path, data: bytes) -> Path | str:
    """`data` to `path` through open_output."""
    with open_output(path, binary=True) as f:
        f.write(data)
    return path


def write_text(path: str | Path, text: str) -> Path | str:
    """`text` to `path` through open_output."""
    with open_output(path) as f:
        f.write(text)
    return path


def json_text(obj, indent: int | None = 2) -> str:
    """`obj` as JSON, made in one call (orjson: an analysis of many ranks is hundreds of thousands of values,
    which json.dump writes one by one); json where orjson refuses a value (an integer beyond 64 bits).
    orjson writes NaN and infinities as null (JSON has neither); options are checked finite where parsed."""
    try:
        text = orjson.dumps(obj, default=str, option=(orjson.OPT_INDENT_2 if indent else 0)
                            | orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS).decode()
    except TypeError:
        text = json.dumps(obj, indent=indent, default=str)
    return text + "\n"


def write_json(path: str | Path, obj, indent: int | None = None, schema: bool = False) -> Path | str:
    """`obj` as JSON to `path` (`-`: standard output) through open_output; `schema`: a command's document,
    with the "schema" version field first. `indent`: for files people edit (standard output is indented)."""
    if schema:
        obj = {"schema": SCHEMA, **obj}
    text = json_text(obj, indent=2 if indent or str(path) == STDOUT else None)
    with open_output(path) as f:
        for at in range(0, len(text), 8192):  # a reader that leaves mid-write ends one piece short: it says so
            f.write(text[at:at + 8192])
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
    if not str(path):
        raise UsageError(f"{flag} '': give a path")
    path = Path(path).absolute()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"{flag} {path}: {'holds files already' if path.is_dir() else 'is a file'}; "
                         "give a new or empty folder")
    check_output(path, flag, directory=True)
    return path


def print_json(obj) -> None:
    """`obj` as indented JSON on standard output."""
    write_json(STDOUT, obj)


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
    console = _quiet()
    width = console.width if console.is_terminal else TABLE_WIDTH
    cells = [list(columns), *([str(v) for v in row] for row in rows)]
    least = sum(max(len(p) for c in col for p, _ in _pieces(c)) for col in zip(*cells))
    pad = 1 if least + 3 * len(columns) - 1 <= width else 0  # too many columns for spaces around each: none
    frame = (2 * pad + 1) * len(columns) - 1  # the spaces each side of every column, a line between two
    widths = _widths(cells, width - frame)
    from rich.table import Table

    table = Table(title=title, caption=caption, title_justify="left", show_edge=False, padding=(0, pad))
    for i, (col, w) in enumerate(zip(columns, widths)):
        table.add_column(_wrap(col, w), justify="left" if i == 0 else "right", no_wrap=True, width=w)
    for row in cells[1:]:
        table.add_row(*(_wrap(c, w) for c, w in zip(row, widths)))
    _quiet(width=max(width, sum(widths) + frame)).print(table)  # wider only where a word needs it


class Progress:
    """A long run's progress on stderr, `total` steps: on a terminal a bar labelled with what runs now; in a log
    or a pipe a line as a step ends, at most one per LINE_EVERY_S (and the last, once there was one), with the
    time so far and the whole run's estimate (the mean step so far, times the steps), so a log of a long run
    shows where it is and how long it has to go, and a short run's stays quiet."""

    LINE_EVERY_S = 10.0

    def __init__(self, what: str, total: int):
        self.what, self.total, self.done = what, total, 0
        self._console = None  # made on first use: off a terminal, a short run prints nothing
        self.started = self.said = time.monotonic()
        self.lines = 0  # printed so far (off a terminal)
        self.bar = None

    @property
    def console(self):
        if self._console is None:
            self._console = _quiet(stderr=True)
        return self._console

    def __enter__(self) -> Progress:
        if not _not_a_terminal(sys.stderr) and self.console.is_terminal:
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
    _quiet(highlight=False, soft_wrap=True).print(text, markup=False)


def warn(text: str) -> None:
    """One line on stderr that does not change the exit code."""
    _quiet(stderr=True, highlight=False, soft_wrap=True).print(f"warning: {text}", markup=False)
