"""Terminal and JSON output shared by the subcommands."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table


def comma_list(text: str) -> tuple[str, ...]:
    """argparse type for 'a,b,c' options."""
    return tuple(v.strip() for v in text.split(",") if v.strip())


def write_json(path: str | Path, obj) -> Path:
    """Write `obj` as JSON through a temporary file, so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, default=str))
    os.replace(tmp, path)
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
    console = Console()
    (console if console.is_terminal else Console(width=200)).print(table)


def print_text(text: str) -> None:
    Console(highlight=False, soft_wrap=True).print(text, markup=False)
