"""Recorded GPU captures shipped inside the package (package data), so a user without a GPU, or before running
their own program, sees what the analyses say on a capture whose answer is known. Each is a folder that
`ccoverlap doctor` wrote, copied unchanged, with PROVENANCE.txt (JSON: the GPU, versions, command and commit
that recorded it, and the results file it comes from; not *.json, which the analyses would read as a trace)."""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.abc's is deprecated (3.14 drops it), importlib.resources.abc's is 3.11+
    from importlib.resources.abc import Traversable

#: the example `ccoverlap example` writes: the known-answer dispatch capture (H200, NCCL 2.28.9), whose answer
#: is the lever priority
DEFAULT = "dispatch"
PROVENANCE = "PROVENANCE.txt"


def files(name: str = DEFAULT) -> list[Traversable]:
    """The files of example `name`, read through importlib.resources (a wheel, a zip, or the source tree)."""
    folder = resources.files(__name__) / name
    return sorted((f for f in folder.iterdir() if f.is_file()), key=lambda f: f.name)


def write(dest: Path, name: str = DEFAULT) -> list[Path]:
    """Copy example `name` into `dest`, made where it is missing (`ccoverlap example` gives a temporary folder,
    renamed onto the one asked for once whole: util/output.open_folder); the paths written."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for f in files(name):
        path = dest / f.name
        path.write_bytes(f.read_bytes())
        written.append(path)
    return written


def commands(dest: Path) -> list[tuple[str, str]]:
    """What to try on the example written to `dest`: (what it shows, the command). The files they write go
    beside `dest`, not into it (a *.json in it would be read as one more trace)."""
    stem = dest.name or "example"
    return [
        ("the verdict, the HTML report and the annotated trace (open it in ui.perfetto.dev)",
         f"ccoverlap analyze {dest} --report {stem}-report.html --perfetto {stem}-perfetto.json"),
        ("each lever's predicted effect on this capture", f"ccoverlap whatif {dest}"),
        ("the same on your own program",
         "ccoverlap doctor --report report.html -- torchrun --nproc-per-node 2 train.py"),
    ]
