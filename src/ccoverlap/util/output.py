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


def write_json(path: str | Path, obj, indent: int | None = None) -> Path:
    """Write `obj` as JSON through a temporary file, so a reader never sees half a file; whatever
    goes wrong (a full disk, a signal) takes the temporary file with it. `indent`: for files people edit."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("w") as f:
            json.dump(obj, f, default=str, indent=indent)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def check_writable(path: str | Path, flag: str, directory: bool = False) -> None:
    """Refuse before any work a file (or, with `directory`, a folder) that could not be written:
    one line, exit 2. Missing folders are fine where the nearest existing one takes new files."""
    path = Path(path).absolute()
    if path.exists() and path.is_dir() != directory:
        raise UsageError(f"{flag} {path}: is a {'file' if directory else 'directory'}")
    base = next(p for p in ((path,) if directory else ()) + tuple(path.parents) if p.exists())
    if not base.is_dir():
        raise UsageError(f"{flag} {path}: {base} is a file, not a directory")
    try:
        tempfile.TemporaryFile(dir=base).close()
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write in {base} ({exc.strerror or exc})") from None


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
