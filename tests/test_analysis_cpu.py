"""The CPU path: a gloo run's CPU timeline gives its exposed communication by the same metrics as a GPU trace
(analysis/cpu.py), `analyze` and `doctor` print it and name the levers that need a GPU."""
import json
import shutil
from pathlib import Path


from ccoverlap.analysis import cpu
from ccoverlap.cli import main
from ccoverlap.control.levers import LEVERS

DDP = Path(__file__).parent / "data" / "cpu" / "ddp-gloo"  # bench's ddp on gloo, 2 ranks (README.txt there)
MAIN, AUTOGRAD, GLOO = 10, 11, 12


def op(name, ts, dur, tid=MAIN, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def cpu_trace(path: Path, rank: int = 0) -> Path:
    """Three profiler steps of 100 us; in each of the first two (the last is left out, as HTA does): aten
    compute 0-40 on the main thread, an all-reduce on gloo's thread 30-70, and the main thread waiting in an
    autograd node 40-70 (a blocking comm hook: no aten op there), then 70-80 compute on the autograd thread."""
    events = []
    for step, t in enumerate((0, 100, 200), 1):
        events += [op(f"ProfilerStep#{step}", t, 100, cat="user_annotation"),
                   op("aten::addmm", t, 40), op("autograd::engine::evaluate_function: AccumulateGrad", t + 40, 30),
                   op("c10d::allreduce_", t + 41, 1), op("gloo:all_reduce", t + 30, 40, GLOO, "user_annotation"),
                   op("aten::mm", t + 70, 10, AUTOGRAD)]
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"backend": "gloo", "rank": rank,
                                                                           "world_size": 2}}))
    return path


def test_exposed_communication_by_hand(tmp_path):
    (r,), problems = cpu.analyze_cpu([cpu_trace(tmp_path / "rank0_trace.json")])
    assert problems == [] and r.steps == 2
    # per step: communication 30-70, compute 0-40 and 70-80: overlap 30-40, exposed 40-70 (the wait)
    assert r.values["communication_us"] == 80 and r.values["overlap_us"] == 20 and r.values["exposed_comm_us"] == 60
    assert r.values["compute_us"] == 100 and r.values["comp_comm_overlap_pct"] == 25
    assert r.exposed_per_step_ms() == 0.03


def test_a_blocking_hook_is_exposed_and_ddps_buckets_overlap():
    strategies, problems = cpu.analyze_folders(DDP)
    assert problems == [] and set(strategies) == {"default", "no-overlap"}
    for r in strategies["no-overlap"]:  # every all-reduce waited for: nothing computes beside it
        assert (r.values["comp_comm_overlap_pct"] == 0
                and r.values["exposed_comm_us"] == r.values["communication_us"] > 0)
    assert all(r.values["overlap_us"] > 0 for r in strategies["default"])  # backward beside the buckets' all-reduces


def test_gpu_levers_come_from_the_lever_table():
    assert (cpu.gpu_levers() == [lv.name for lv in LEVERS if "cpu" not in lv.platforms]
            and "priority" in cpu.gpu_levers())


def test_analyze_on_cpu_traces_prints_the_exposed_communication_and_the_gpu_levers(capsys, tmp_path):
    assert main(["analyze", str(DDP / "no-overlap")]) == 0
    out = capsys.readouterr().out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict"))
    assert "per step on the CPU timeline" in verdict and "levers that need a GPU" in verdict and "priority" in verdict
    assert main(["analyze", str(DDP), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["timeline"] == "cpu" and len(doc["strategies"]["default"]) == 2
    assert doc["levers_needing_a_gpu"] == cpu.gpu_levers()
    (tmp_path / "x.json").write_text(json.dumps({"traceEvents": [op("aten::mm", 0, 5)]}))  # no communication at all
    assert main(["analyze", str(tmp_path)]) == 2
    assert "nothing could be analysed" in capsys.readouterr().err


def test_doctor_on_the_cpu_reports_the_cpu_timeline(tmp_path, capsys):
    from ccoverlap.doctor import record
    from ccoverlap.doctor.config import DoctorConfig
    from ccoverlap.doctor.session import diagnose

    out = tmp_path / "out"
    for rank in (0, 1):
        log = record.Log(out, rank, {"world_size": 2, "skip": 1, "steps": 3})
        log.write({"window": "open", "cuda": False, "trace": log.trace.name})
        for step in range(1, 6):
            log.write({"step": step, "ms": None if step == 1 else 5.0, "gpu_ms": None, "profiled": 2 <= step <= 4,
                       "warmup": step == 1})
        log.write({"window": "closed", "trace": log.trace.name, "recorded": 3, "complete": True})
        shutil.copy(DDP / "no-overlap" / f"rank{rank}_trace.json.gz", log.trace)
    cfg = DoctorConfig(out=str(out), json=str(tmp_path / "d.json"))
    assert diagnose(out, cfg, ["python", "train.py"], 0) == []
    shown = capsys.readouterr().out
    assert "CPU timeline" in shown and "levers that need a GPU" in shown and "no overlap analysis" not in shown
    doc = json.loads((tmp_path / "d.json").read_text())
    ranks = doc["cpu_analysis"]["strategies"]["out"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["exposed_comm_us"] > 0 for r in ranks)
    assert doc["analysis"] is None  # the GPU analysis: none


def test_malformed_events_are_left_out_not_a_traceback(tmp_path):
    good = op("gloo:all_reduce", 0, 10, GLOO, "user_annotation")
    bad = [3, {"ph": "X", "name": "gloo:x", "ts": "1", "dur": 1, "tid": 1}, dict(good, tid=[1]),
           dict(good, args=[1]), dict(op("aten::mm", 0, 5), dur=-1)]
    (tmp_path / "rank0_trace.json").write_text(json.dumps({"traceEvents": [*bad, good, op("aten::mm", 0, 4)]}))
    (tmp_path / "rank1_trace.json").write_text(json.dumps({"traceEvents": 5}))
    (r,), problems = cpu.analyze_cpu(sorted(tmp_path.iterdir()))
    # kept: the good span and its twin with args that are no object (merged: 0-10), the aten op 0-4
    assert r.values["communication_us"] == 10 and r.values["exposed_comm_us"] == 6
    assert [p.path.name for p in problems] == ["rank1_trace.json"]
