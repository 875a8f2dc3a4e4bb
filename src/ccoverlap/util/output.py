"""Terminal and JSON output shared by the subcommands."""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ccoverlap.util.errors import UsageError


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
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def print_table(title: str, columns: list[str], rows: list[list], caption: str | None = None) -> None:
    table = Table(title=title, caption=caption, title_justify="left")
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(str(v) for v in row))
    console = QuietConsole()
    (console if console.is_terminal else QuietConsole(width=200)).print(table)


def print_text(text: str) -> None:
    QuietConsole(highlight=False, soft_wrap=True).print(text, markup=False)


def warn(text: str) -> None:
    """One line on stderr that does not change the exit code."""
    QuietConsole(stderr=True, highlight=False, soft_wrap=True).print(f"warning: {text}", markup=False)
