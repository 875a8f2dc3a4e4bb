"""The tables of docs/results.md, rendered from the results files they cite, so each figure has one source: the JSON
under bench/results/. A generated table sits between two markers:

  <!-- generated: python bench/summarize/results_md.py (NAME: FILE ...); edit the summarizer, not this table -->
  (the table)
  <!-- end generated -->

NAME is a key of TABLES (one entry per kind of table); its render function, in the summarizer that prints that
kind of table, takes the marker's files (relative to the repository) loaded, in order.

usage: python bench/summarize/results_md.py --check [DOC.md]   (exit 1, one line per stale table)
       python bench/summarize/results_md.py --write [DOC.md]   (re-render every table in place)
Unknown NAME, a missing file or unbalanced markers: one line, exit 2.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DOC = ROOT / "docs" / "results.md"
START = re.compile(r"<!-- generated: python bench/summarize/results_md\.py \(([\w.-]+): ([^)]*)\); "
                   r"edit the summarizer, not this table -->")
END = "<!-- end generated -->"


def _summarizer(name: str):
    """A sibling summarizer module (they are scripts, not a package), loaded once under its own name."""
    key = f"_summarize_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        sys.modules[key] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[key]


#: table name -> its render function (the loaded files of the marker, in order -> the markdown table)
TABLES: dict[str, Callable[[list[dict]], str]] = {
    "lab-cases": _summarizer("lab").render_cases,
    "lab-orders": _summarizer("lab").render_orders,
    "lab-library": _summarizer("lab").render_library,
    "bench-x2": _summarizer("bench").render_x2,
    "bench-emulated": _summarizer("bench").render_emulated,
    "bench-emulation-vs-real": _summarizer("bench").render_emulation_vs_real,
    "bench-repeats": _summarizer("bench").render_repeats,
    "bench-against-default": _summarizer("bench").render_against_default,
    "analyze-means": _summarizer("analyze").render_means,
    "analyze-per-rank": _summarizer("analyze").render_per_rank,
    "carveout-classes": _summarizer("carveout").render_classes,
    "levers-groups": _summarizer("levers").render_groups,
    "doctor-lab-cases": _summarizer("doctor").render_lab_cases,
    "tune-runs": _summarizer("tune").render_runs,
    "foundation-checks": _summarizer("foundation").render_checks,
    "known-answers-doctor": _summarizer("known_answers").render_issue19,
    "known-answers-typical-steps": _summarizer("known_answers").render_typical_steps,
    "known-answers-tune-orders": _summarizer("known_answers").render_tune_orders,
    "whatif-cells": _summarizer("whatif").render_cells,
    "whatif-validation-captures": _summarizer("whatif_validation").render_captures,
    "whatif-reach": _summarizer("reach").render_reach,
}


class MarkerError(Exception):
    """Markers this tool cannot act on: the one line it prints before exiting 2."""


@dataclass
class Block:
    line: int  # the start marker's line number (1-based)
    name: str
    files: list[str]
    start: int  # index of the start marker's line
    end: int  # index of the end marker's line


def blocks(lines: list[str]) -> list[Block]:
    out, open_ = [], None
    for i, line in enumerate(lines):
        if m := START.fullmatch(line.strip()):
            if open_:
                raise MarkerError(f"line {i + 1}: a generated block starts inside the one of line {open_.line}")
            if m[1] not in TABLES:
                raise MarkerError(f"line {i + 1}: unknown table {m[1]!r} (known: {', '.join(TABLES)})")
            open_ = Block(i + 1, m[1], m[2].split(), i, -1)
        elif line.strip().startswith("<!-- generated"):
            raise MarkerError(f"line {i + 1}: a generated marker this tool cannot read")
        elif line.strip() == END:
            if not open_:
                raise MarkerError(f"line {i + 1}: {END} without a start")
            open_.end = i
            out.append(open_)
            open_ = None
    if open_:
        raise MarkerError(f"line {open_.line}: generated block {open_.name!r} has no {END}")
    return out


def render(block: Block, root: Path = ROOT) -> list[str]:
    """The block's body as it should read: a blank line, the table, a blank line (paragraphs for the docs' checks)."""
    docs = []
    for name in block.files:
        path = root / name
        if not path.is_file():
            raise MarkerError(f"line {block.line}: {block.name}: no file {name}")
        docs.append(json.loads(path.read_text()))
    try:
        table = TABLES[block.name](docs)
    except (KeyError, IndexError, TypeError, ValueError) as e:  # a file this kind of table cannot be read from
        raise MarkerError(f"line {block.line}: {block.name}: cannot render from {' '.join(block.files)}: "
                          f"{type(e).__name__} {e}") from e
    return ["", *table.splitlines(), ""]


def stale(path: Path = DOC, root: Path = ROOT) -> tuple[list[str], list[str]]:
    """('line N: NAME is stale' per block that differs from its rendering, the document re-rendered)."""
    lines = path.read_text().splitlines()
    out, report, done = [], [], 0
    for b in blocks(lines):
        body = render(b, root)
        if lines[b.start + 1:b.end] != body:
            report.append(f"{path.name}:{b.line}: {b.name} is stale (python bench/summarize/results_md.py --write)")
        out += lines[done:b.start + 1] + body
        done = b.end
    return report, out + lines[done:]


def write(path: Path, lines: list[str]) -> None:
    """Atomically: a temporary file beside it, renamed over it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("--check", "--write") or len(argv) > 2:
        print(next(p for p in __doc__.split("\n\n") if p.startswith("usage:")), file=sys.stderr)
        return 2
    path = Path(argv[1]) if len(argv) > 1 else DOC
    try:
        report, lines = stale(path)
    except MarkerError as e:
        print(f"{path.name}: {e}", file=sys.stderr)
        return 2
    if argv[0] == "--write":
        if report:
            write(path, lines)
        print(f"{len(report)} table(s) re-rendered in {path}")
        return 0
    print("\n".join(report) or f"every generated table of {path} is current")
    return 1 if report else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
