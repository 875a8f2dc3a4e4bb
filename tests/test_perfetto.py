"""The annotated trace (`--perfetto`): valid Chrome trace-event JSON, every rank's captured events, the GPU lanes
named for what runs on them, the findings as lanes of their own; and a rank taken out of it again gives the same
overlap by HTA's definition (test_analysis_hta: ccoverlap's numbers are HTA's) as the original trace."""
import gzip
import importlib.util
import json
import re
from pathlib import Path

import pytest

from ccoverlap import examples
from ccoverlap.analysis import analyze, perfetto
from ccoverlap.cli import main
from hta_reference import RECORDED, TRACES, hta_numbers
from test_analysis_hta import check

HTA_KEYS = ("comp_comm_overlap_pct", "idle_us", "compute_us", "span_us", "exposed_comm_us", "communication_us")


def annotated(folder: Path) -> tuple[dict, object]:
    result = analyze(folder)
    return json.loads(json.dumps(perfetto.annotate(perfetto.ranks_of(result)))), result  # as a file holds it


def split(doc: dict, into: Path) -> Path:
    """Each rank's events (its own processes and its findings) as a trace file of its own, as Kineto wrote it."""
    into.mkdir()
    for r in doc["ccoverlap"]["ranks"]:
        pids = {*r["pids"], r["findings_pid"]}
        events = [e for e in doc["traceEvents"] if e["pid"] in pids]
        (into / f"rank{r['rank']}_trace.json").write_text(json.dumps(
            {"traceEvents": events, "distributedInfo": r["distributedInfo"],
             "deviceProperties": r["deviceProperties"]}))
    return into


def test_a_valid_chrome_trace_with_every_rank_and_named_lanes():
    doc, result = annotated(TRACES / "h200" / "default")
    events = doc["traceEvents"]
    original = sum(len(json.load(gzip.open(p))["traceEvents"]) for p in sorted((TRACES / "h200" / "default").iterdir()))
    assert {r["rank"] for r in doc["ccoverlap"]["ranks"]} == {0, 1}
    for e in events:
        assert e["ph"] in {"X", "i", "M", "s", "t", "f", "B", "E"} and type(e["pid"]) is int and "tid" in e, e
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)), e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
    kept = [e for e in events if e.get("cat") != perfetto.CATEGORY and e["ph"] != "M"]
    assert len(kept) == sum(1 for p in sorted((TRACES / "h200" / "default").iterdir())
                            for e in json.load(gzip.open(p))["traceEvents"] if e["ph"] != "M") < original
    pids = [set(r["pids"]) | {r["findings_pid"]} for r in doc["ccoverlap"]["ranks"]]
    assert not pids[0] & pids[1]  # the ranks' processes never collide
    flows = [(e["id"], e["ph"]) for e in events if e["ph"] in {"s", "f"}]
    assert len(flows) == len(set(flows)) and all(type(i) is int for i, _ in flows)  # kept apart across ranks
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    gpu = {(e["pid"], e["tid"]) for e in events if e.get("cat") == "kernel"}
    lanes = {names[lane] for lane in gpu}
    assert all(re.fullmatch(r"(compute|communication|memory)( \+ (communication|memory))* \(stream \d+\)", n)
               for n in lanes), lanes
    assert {"compute + memory (stream 7)", "communication (stream 17)"} <= lanes
    processes = [e["args"]["name"] for e in events if e["name"] == "process_name"]
    assert "rank 0: ccoverlap findings" in processes and "rank 1: GPU 1" in processes


def test_a_rank_taken_out_again_has_the_original_overlap(tmp_path):
    doc, original = annotated(TRACES / "h200" / "default")
    again = analyze(split(doc, tmp_path / "again"))
    theirs = {r.rank: r.values for r in original.ranks}
    for r in again.ranks:  # the findings (category ccoverlap, no stream) are not GPU work
        assert {k: r.values[k] for k in HTA_KEYS} == {k: theirs[r.rank][k] for k in HTA_KEYS}
    recorded = json.loads(RECORDED.read_text())["folders"]["h200/default"]
    check({str(r.rank): r.to_dict() for r in again.ranks}, recorded)


@pytest.mark.skipif(importlib.util.find_spec("hta") is None, reason="HTA (holistictraceanalysis) is not installed")
def test_live_hta_reads_the_rank_taken_out_as_the_original(tmp_path):
    doc, _ = annotated(TRACES / "h200" / "default")
    check(hta_numbers(split(doc, tmp_path / "again")), hta_numbers(TRACES / "h200" / "default"))


def test_the_findings_of_the_dispatch_example(tmp_path):
    examples.write(tmp_path / "ex")
    doc, result = annotated(tmp_path / "ex")
    (rank,) = result.ranks
    mine = [e for e in doc["traceEvents"] if e.get("cat") == perfetto.CATEGORY]
    exposed = [e for e in mine if e["name"] == "exposed communication"]
    assert sum(e["dur"] for e in exposed) == pytest.approx(rank.exposed_comm_us)
    waits = [e for e in mine if e["name"].startswith("SM wait")]
    assert len(waits) == 3 and all(e["args"]["cause"] == "dispatch_order" and e["args"]["blocker"] == "known_fat"
                                   for e in waits)
    waited = sorted(c.sm_wait_us for c in rank.diagnosis.comm if c.sm_wait_us > 10)
    assert sorted(e["dur"] for e in waits) == pytest.approx(waited)
    (lever,) = [e for e in mine if e["ph"] == "i"]
    assert lever["name"] == "try priority" and lever["args"]["verdict"] == rank.verdict.line


def test_cli_links_the_trace_from_the_report_and_refuses_an_input(tmp_path, capsys):
    examples.write(tmp_path / "ex")
    report, trace = tmp_path / "r.html", tmp_path / "out" / "t.json"
    assert main(["analyze", str(tmp_path / "ex"), "--report", str(report), "--perfetto", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "try priority" in out and f"annotated trace: {trace}" in out
    assert json.loads(trace.read_text())["ccoverlap"]["schema"] == perfetto.SCHEMA
    html = report.read_text()
    assert 'href="out/t.json"' in html and "ui.perfetto.dev" in html and "chrome://tracing" in html
    target = tmp_path / "ex" / "rank0_trace.json.gz"
    before = target.read_bytes()
    assert main(["analyze", str(tmp_path / "ex"), "--perfetto", str(target)]) == 2
    assert "lies in) the input" in capsys.readouterr().err and target.read_bytes() == before


def test_doctor_writes_the_annotated_trace_of_every_rank(tmp_path, capsys):
    import shutil

    from ccoverlap.doctor.config import DoctorConfig
    from ccoverlap.doctor.session import diagnose
    from test_doctor import gpu_record

    out = tmp_path / "out"
    for rank in (0, 1):
        gpu_record(out, rank)
        shutil.copy(TRACES / "h200" / "default" / f"rank{rank}_trace.json.gz", out / f"rank{rank}_trace.json.gz")
    cfg = DoctorConfig(out=str(out), report=str(tmp_path / "r.html"), perfetto=str(tmp_path / "t.json"))
    assert diagnose(out, cfg, ["python", "train.py"], 0) == []
    assert f"annotated trace: {tmp_path / 't.json'}" in capsys.readouterr().out
    doc = json.loads((tmp_path / "t.json").read_text())
    assert [r["rank"] for r in doc["ccoverlap"]["ranks"]] == [0, 1]
    assert 'href="t.json"' in (tmp_path / "r.html").read_text()
