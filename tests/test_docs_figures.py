"""Every measured figure in the README and docs/ is found in the results file it cites (issue 33.9).

The convention: a paragraph, bullet or table that states measured figures names its results files
(`name.json` under bench/results/, a folder of them, or a pattern such as `tune-2026-12-01-h200-<run>.json`);
a table also takes the files of the paragraph just above it, and every block those of its section's heading.
In such a block every decimal figure (`16.56`, `0.959x`, `1,234.5`) and every percentage must equal, within
its printed rounding, a number of those files: the value itself, x100 (a share), x1000 (s to ms), /1000
(us to ms), its inverse (a speedup) or 100 x (value - 1) (a ratio as a change); a figure in a recorded "verdict"
(the program's own line: "1.014 ms (32.0%)") counts too. Raw sample lists count by their min, max, median and mean.
Version strings (2.28.9, and a version of two parts after its software's name: CUDA 13.0, torch 2.11) are not
figures. A block that cites no results file is not checked: prose about a mechanism
cites nothing. A generated table is checked by tests/test_results_md.py instead (rendered from its files).
"""
import fnmatch
import json
import re
import statistics
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_CITE = re.compile(r"([\w.<>\-/]+\.json|[\w.\-]+-h200/)")
# 16.56, 1,234.5 (not part of a version such as 2.28.9 or a name), or an integer percentage (+95%).
_FIGURE = re.compile(r"(?<![\w.\-])(?:(\d{1,3}(?:,\d{3})+|\d+)\.(\d+)(?![.\d]*\d)|(\d+)(?=%))")
# A figure right after one of these names is its version (CUDA 13.0, torch 2.11's traces), not a measurement.
_VERSION_OF = re.compile(r"\b(?:CUDA|torch|NCCL|Python|pandas|HTA|HolisticTraceAnalysis|driver)\s+$")


def _numbers(obj, out: set[float]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "verdict" and isinstance(v, str):  # the program's own verdict line ("1.014 ms (32.0%)")
                out.update(float(f"{(whole or integer).replace(',', '')}.{frac or 0}")
                           for whole, frac, integer in _FIGURE.findall(v))
            else:
                _numbers(v, out)
    elif isinstance(obj, list):
        nums = [x for x in obj if isinstance(x, int | float) and not isinstance(x, bool)]
        if len(nums) > 8 and len(nums) == len(obj):  # raw samples: what a summary can state of them
            out.update((min(nums), max(nums), statistics.median(nums), statistics.fmean(nums)))
        else:
            for v in obj:
                _numbers(v, out)
    elif isinstance(obj, int | float) and not isinstance(obj, bool):
        out.add(float(obj))


@cache
def _values(name: str) -> frozenset[float]:
    """The numbers of one cited results file, or of every JSON in a cited folder."""
    out: set[float] = set()
    path = RESULTS / name
    for f in sorted(path.rglob("*.json")) if path.is_dir() else [path]:
        _numbers(json.loads(f.read_text()), out)
    return frozenset(out)


def cited(text: str) -> list[str]:
    """The results files (names relative to bench/results/) a block of text names."""
    names = []
    for raw in _CITE.findall(text):
        name = raw.removeprefix("bench/results/")
        if "<" in name:
            pattern = re.sub(r"<[^>]*>", "*", name)
            names += sorted(p.name for p in RESULTS.glob("*.json") if fnmatch.fnmatch(p.name, pattern))
        elif (RESULTS / name).exists():
            names.append(name)
        elif (RESULTS / Path(name).name).exists():
            names.append(Path(name).name)
    return names


def found(figure: float, decimals: int, values: frozenset[float]) -> bool:
    tol = 0.5 * 10**-decimals + 1e-9
    for v in values:
        for c in (v, 100 * v, 1000 * v, v / 1000, 100 * (v - 1), 1 / v if v else 0.0):
            if abs(abs(c) - figure) <= tol:
                return True
    return False


def blocks(text: str):
    """(first line number, lines, files cited) per paragraph or table, with the inherited citations. A generated
    table (between `<!-- generated: ... -->` and `<!-- end generated -->`) is left to tests/test_results_md.py,
    which renders it from the files its marker names: its ratios are derived there, not looked up."""
    heading: list[str] = []
    above: list[str] = []
    lines: list[str] = []
    start = 0
    generated = False
    for no, line in enumerate([*text.splitlines(), ""], 1):
        if line.startswith("<!-- generated:") or generated:
            generated = line.strip() != "<!-- end generated -->"
            continue
        if line.strip():
            if not lines:
                start = no
            lines.append(line)
            continue
        if not lines:
            continue
        own = cited("\n".join(lines))
        if lines[0].startswith("#"):
            heading = own
        table = lines[0].startswith("|")
        yield start, lines, sorted({*own, *heading, *(above if table else [])})
        if not table:
            above = own
        lines = []


def unbacked(text: str) -> list[str]:
    """'line: figure (files)' for each measured figure not found in the files its block cites."""
    out = []
    for start, lines, files in blocks(text):
        if not files:
            continue
        values = frozenset().union(*(_values(f) for f in files))
        for offset, line in enumerate(lines):
            for m in _FIGURE.finditer(line):
                if _VERSION_OF.search(line[:m.start()]):
                    continue
                whole, frac, pct = m.groups()
                figure = float(f"{whole.replace(',', '')}.{frac}") if frac else float(pct)
                if not found(figure, len(frac) if frac else 0, values):
                    out.append(f"{start + offset}: {m.group()} ({', '.join(files[:3])})")
    return out


UNTRACED = ROOT / "tests" / "data" / "docs_figures_untraced.tsv"


def _untraced(doc: Path) -> list[str]:
    """This doc's figures not found in their cited files, as UNTRACED lists them: 'figure<TAB>line start'."""
    lines = doc.read_text().splitlines()
    out = []
    for u in unbacked(doc.read_text()):
        no, rest = u.split(": ", 1)
        out.append(f"{rest.split(' (')[0]}\t{lines[int(no) - 1].strip()[:60]}")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_measured_figure_is_in_the_results_file_its_block_cites(doc):
    known = [
        line.split("\t", 1)[1]
        for line in UNTRACED.read_text().splitlines()
        if line and not line.startswith("#") and line.split("\t", 1)[0] == doc.name
    ]
    found_now = _untraced(doc)
    assert [f for f in found_now if f not in known] == [], "cite the results file that holds it, or correct it"
    assert [f for f in known if f not in found_now] == [], f"traced or gone: delete its line from {UNTRACED.name}"


def test_the_check_catches_a_figure_that_is_in_no_cited_file(tmp_path):
    text = (
        "Parse throughput (`parse-throughput-issue19-2026-12-02-cpu.json`): 19.9 MB/s, 37.4 MB/s quiet.\n\n"
        "| run | MB/s |\n| --- | --- |\n| mine | 19.9 |\n| quiet | 25.1 |\n\n"
        "Uncited prose may say 37.4 of anything.\n"
    )
    assert [u.split(" (")[0] for u in unbacked(text)] == ["1: 37.4", "6: 25.1"]


def test_versions_names_and_uncited_blocks_are_not_figures():
    text = "NCCL 2.28.9, torch 2.11.0+cu130 (`parse-throughput-issue19-2026-12-02-cpu.json`), sm_90, x86_64.\n"
    assert unbacked(text) == []
    text = "CUDA 13.0, torch 2.11's traces (`parse-throughput-issue19-2026-12-02-cpu.json`): 37.4 MB/s.\n"
    assert [u.split(" (")[0] for u in unbacked(text)] == ["1: 37.4"]
    assert cited("`tune-2026-12-01-h200-<run>.json`") == sorted(
        p.name for p in RESULTS.glob("tune-2026-12-01-h200-*.json")
    )


def test_a_generated_table_is_left_to_its_renderer_and_the_prose_after_it_is_checked():
    marker = ("<!-- generated: python bench/summarize/results_md.py (lab-orders: "
              "bench/results/parse-throughput-issue19-2026-12-02-cpu.json); edit the summarizer, not this table -->")
    text = (f"Parse (`parse-throughput-issue19-2026-12-02-cpu.json`): 19.9 MB/s.\n\n{marker}\n\n"
            "| run | x |\n| --- | --- |\n| mine | 1.234 |\n\n<!-- end generated -->\n\n"
            "After (`parse-throughput-issue19-2026-12-02-cpu.json`): 37.4.\n")
    assert [u.split(" (")[0] for u in unbacked(text)] == ["11: 37.4"]
