"""docs/results.md's generated tables match what their summarizers render from the files they cite (issue 33.9),
and bench/summarize/results_md.py reports, rewrites and refuses as it says; the unit tests work on copies."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("results_md", ROOT / "bench" / "summarize" / "results_md.py")
results_md = importlib.util.module_from_spec(_spec)
sys.modules["results_md"] = results_md
_spec.loader.exec_module(results_md)

LAB = "bench/results/lab-2026-11-30-h200.json"


def _marker(name: str, *files: str) -> str:
    return (f"<!-- generated: python bench/summarize/results_md.py ({name}: {' '.join(files)}); "
            "edit the summarizer, not this table -->")


def _doc(tmp_path: Path, *body: str) -> Path:
    path = tmp_path / "results.md"
    path.write_text("\n".join(["# Results", "", *body, ""]))
    return path


def test_every_generated_table_of_the_docs_is_current():
    report, _ = results_md.stale()
    assert report == [], "run python bench/summarize/results_md.py --write"


def test_the_docs_have_generated_tables_and_every_name_is_used():
    names = [b.name for b in results_md.blocks(results_md.DOC.read_text().splitlines())]
    assert set(names) == set(results_md.TABLES)


def test_a_stale_table_is_reported_with_its_line_and_write_fixes_it(tmp_path, capsys):
    table = results_md.TABLES["lab-orders"]([results_md.json.loads((ROOT / LAB).read_text())])
    path = _doc(tmp_path, "Some prose.", "", _marker("lab-orders", LAB), "", table.replace("1.038", "1.040"), "",
                results_md.END, "", "After.")
    assert results_md.main(["--check", str(path)]) == 1
    assert capsys.readouterr().out.strip().splitlines() == [
        "results.md:5: lab-orders is stale (python bench/summarize/results_md.py --write)"]
    assert results_md.main(["--write", str(path)]) == 0
    text = path.read_text()
    assert table in text and "1.040" not in text and text.endswith("After.\n")
    assert results_md.main(["--check", str(path)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["results.md"]  # no temporary file left beside it


@pytest.mark.parametrize("body, says", [
    ([_marker("no-such-table", LAB), "", "| x |", "", results_md.END], "unknown table 'no-such-table'"),
    ([_marker("lab-orders", "bench/results/missing.json"), "", results_md.END], "no file bench/results/missing.json"),
    ([_marker("lab-orders", LAB), "", "| x |"], "has no <!-- end generated -->"),
    (["| x |", results_md.END], "without a start"),
    ([_marker("lab-orders", LAB), _marker("lab-cases", LAB), results_md.END], "starts inside"),
    (["<!-- generated: lab-orders -->", results_md.END], "cannot read"),
    ([_marker("lab-orders", "bench/results/carveout-2026-12-01-h200.json"), "", results_md.END], "cannot render"),
])
def test_bad_markers_exit_2_with_one_line_and_leave_the_file(tmp_path, capsys, body, says):
    path = _doc(tmp_path, *body)
    before = path.read_text()
    assert results_md.main(["--write", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
    assert path.read_text() == before


def test_a_pytest_summary_counts_what_ran_not_the_deselected():
    log = ("collected 74 items / 71 deselected / 3 selected\n"
           "======================= 3 passed, 71 deselected in 7.41s =======================\n"
           "........ [100%]\n5 failed, 69 passed, 2 skipped in 15.62s\n")
    assert results_md._summarizer("foundation").pytest_runs(log) == ["3 / 3", "69 / 76"]


def test_the_realized_best_lists_the_levers_within_the_noise_of_the_best_and_a_tiny_gain_as_none():
    known = results_md._summarizer("known_answers")
    row = {"verdict": "faster", "same_losses": True}
    real = {"plain_median_ms": 4.0, "best_lever": "a", "best_gain_ms": 1.0,
            "levers": {"a": row | {"median_ms": 3.0, "ci": [0.74, 0.76]},
                       "b": row | {"median_ms": 3.01, "ci": [0.75, 0.77]},  # within the noise of the best
                       "c": row | {"median_ms": 3.5, "ci": [0.86, 0.88]}}}
    assert known._realized(real) == "a 3.000 (1.000); b 3.010 (0.990)"
    tiny = real | {"best_gain_ms": 0.004, "levers": {"a": row | {"median_ms": 3.996, "ci": [0.998, 0.999]}}}
    assert known._realized(tiny) == "none beyond 2% (a 3.996: 0.10%, 4 us)"
    assert known._realized(real | {"best_lever": None}) == "none"
