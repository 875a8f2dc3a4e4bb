"""The report and the charts, point by point as issue 33.7 lists them."""
from __future__ import annotations

from pathlib import Path

import pytest

from ccoverlap.analysis.model import short_name
from ccoverlap.analysis.reader import Problem, grouped
from ccoverlap.cli import main

TRACES = Path(__file__).parent / "data" / "traces"
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::{f}<float>, std::array<char*, 1ul> >"
               "(int, at::native::{f}<float>, std::array<char*, 1ul>)")


def test_one_warning_line_per_kind_with_its_count_and_files():
    notes = [Problem(Path(f"run/rank{r}_trace.json.gz"), f"{10 + r} GPU kernel(s) have no launch call: left out")
             for r in range(6)] + [Problem(Path("run/rank0_trace.json.gz"), "skipped: truncated")]
    lines = grouped(notes)
    assert len(lines) == 2
    assert lines[0].startswith("6 files in run: rank0_trace.json.gz, rank1_trace.json.gz,")
    assert "10 GPU kernel(s)" in lines[0] and "(numbers from the first)" in lines[0]
    assert lines[1] == "run/rank0_trace.json.gz: skipped: truncated"


def test_instances_of_one_templated_kernel_get_distinguishable_names():
    fill, mul = short_name(ELEMENTWISE.format(f="FillFunctor")), short_name(ELEMENTWISE.format(f="MulFunctor"))
    assert fill == "at::native::vectorized_elementwise_kernel<FillFunctor>" and fill != mul
    anonymous = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
                 "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)")
    assert short_name(anonymous) == "at::native::cunn_SoftMaxForward<SoftMaxForwardEpilogue>"
    assert len(short_name(ELEMENTWISE.format(f="A" * 90))) == 64


@pytest.mark.parametrize("baseline", [False, True])
def test_the_report_shows_pads_only_against_a_baseline_and_needs_no_docs(tmp_path, capsys, baseline):
    report = tmp_path / "r.html"
    base = ["--baseline", str(TRACES / "strategies" / "default")] if baseline else []
    assert main(["analyze", str(TRACES / "strategies"), *base, "--report", str(report), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    text = report.read_text()
    assert ("padded launches" in text) is baseline and ("pad B" in text) is baseline
    assert ("padded" in out) is baseline  # the terminal's table too
    assert "Kineto" not in text and "docs/" not in text
    assert "HTA's definition" in text and "SM-wait: from when it could have started" in text


def test_no_overlap_bar_where_the_table_says_dash():
    from ccoverlap.analysis.plots import _overlap_labels

    assert _overlap_labels({"a": {"comp_comm_overlap_pct": None}, "b": {"comp_comm_overlap_pct": 41.26}}) == [
        "-", "41.3"]


def test_the_whatif_title_keeps_the_whole_source():
    from ccoverlap.whatif.plots import title

    source = "/very/long/" + "/".join(f"folder{i}" for i in range(20)) + "/capture"
    said = title({"source": source, "predicted_for": "h200", "assumptions": [], "label": "as captured"})
    assert said.replace("\n", "").startswith(source) and said.endswith("h200: as captured")


def _cpu_outcome(comparisons: bool):
    from ccoverlap.tune import space
    from ccoverlap.tune.search import Outcome, Trial

    trials = [Trial(1, "baseline", space.DEFAULT, "ok", samples=(10.2, 10.4, 10.9)),
              Trial(2, "baseline", space.DEFAULT, "ok", samples=(10.1, 10.6, 10.3)),
              Trial(3, "screen", space.DEFAULT, "failed", error="boom")]
    reason = "default kept: 0 candidates (the levers need a GPU; this run is on the CPU)"
    return Outcome(trials, space.DEFAULT, False, reason, None, {}, None, {}, 0.0)


def test_tune_chart_on_a_cpu_says_why_it_is_empty_and_names_its_markers(tmp_path):
    from ccoverlap.tune.report import _legend, chart

    outcome = _cpu_outcome(False)
    assert [h.get_label() for h in _legend(outcome)] == ["baseline", "the default", "failed (no steps)"]
    png = chart(outcome, tmp_path / "tune.png")
    assert png.read_bytes().startswith(b"\x89PNG")


def test_a_table_of_many_columns_fits_80_columns_without_breaking_a_word(capsys):
    from ccoverlap.util.output import print_table

    columns = ["strategy", "rank", "overlap%", "comm", "exposed", "compute", "idle", "comp x", "comm x", "padded"]
    rows = [["priority+shape", 0, "94.11", "14.636", "10.273", "113.863", "0.400", "1.02", "1.10", 48]]
    print_table("ms per rank", columns, rows)
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 80
    assert all(word in "\n".join(lines) for word in ("priority+shape", "overlap%", "113.863", "exposed"))
