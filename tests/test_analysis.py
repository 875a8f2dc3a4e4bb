"""`ccoverlap analyze`: the trace model, the metrics (checked by an independent brute-force
computation on a time grid), bad input, the CLI and the report."""
from __future__ import annotations

import errno
import gzip
import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
from test_doctor import table_rows
from hypothesis import given, settings
from hypothesis import strategies as st

import kineto_synth as ks
from ccoverlap.analysis import analyze, metrics
from ccoverlap.analysis.intervals import intersection, length, merge, subtract
from ccoverlap.analysis.metrics import exposed_intervals, rank_metrics
from ccoverlap.analysis.model import Classifier, KernelClass, analysed_kernels, device_limits, short_name
from ccoverlap.analysis.reader import read_trace
from ccoverlap.cli import main
from ccoverlap.util.errors import UsageError
from ccoverlap.model.limits import PRESETS
from hta_reference import TRACES, trace_folders


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- an independent reading of a trace: json module, own rules, a 1 ns grid ---

def _load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def brute_force(path: Path) -> dict[str, float]:
    """The metrics of one trace, recomputed without ccoverlap: paint every activity on a 1 ns grid."""
    events = [e for e in _load(path)["traceEvents"] if e.get("ph") == "X"]
    gpu = [e for e in events if isinstance(e.get("args", {}).get("stream"), int)
           and e["cat"] not in ("gpu_user_annotation", "cuda_sync")]
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    if len(steps) >= 2:  # HTA keeps GPU work launched before the last profiler step starts
        last = max(e["ts"] for e in steps)
        on_gpu = {id(e) for e in gpu}
        launched = {e["args"]["correlation"]: e["ts"] for e in events
                    if "correlation" in e.get("args", {}) and id(e) not in on_gpu}
        gpu = [e for e in gpu if launched.get(e["args"]["correlation"], last) < last]
    ns = lambda t: int(round(t * 1000))  # noqa: E731
    lo = min(ns(e["ts"]) for e in gpu)
    hi = max(ns(e["ts"] + e["dur"]) for e in gpu)
    grids = {kind: np.zeros(hi - lo, dtype=bool) for kind in ("comm", "mem", "comp")}
    for e in gpu:
        kind = ("comm" if re.match(r"nccl.*Kernel", e["name"]) else
                "mem" if e["cat"] in ("gpu_memcpy", "gpu_memset") else "comp")
        grids[kind][ns(e["ts"]) - lo: ns(e["ts"] + e["dur"]) - lo] = True
    comm, comp = grids["comm"], grids["comp"]
    busy = comm | comp | grids["mem"]
    us = lambda mask: mask.sum() / 1000  # noqa: E731
    return {
        "communication_us": us(comm), "compute_us": us(comp), "memory_us": us(grids["mem"]),
        "overlap_us": us(comm & comp), "exposed_comm_us": us(comm & ~comp), "idle_us": us(~busy),
        "span_us": (hi - lo) / 1000, "comp_comm_overlap_pct": 100 * (comm & comp).sum() / comm.sum(),
    }


def good_trace_files():
    return [f for d in trace_folders() for f in sorted(d.iterdir()) if f.name.endswith((".json", ".json.gz"))]


@pytest.mark.parametrize("path", good_trace_files(), ids=lambda p: str(p.relative_to(TRACES)))
def test_metrics_match_brute_force_on_every_fixture(path):
    got = rank_metrics("s", read_trace(path)).to_dict()
    for key, want in brute_force(path).items():
        # 5 ns: real traces (h200/) have float64 microsecond times near 5e12 us, where one ulp is
        # about 1 ns; the grid rounds every edge to 1 ns, ccoverlap keeps the floats (seen: 2.4 ns)
        assert got[key] == pytest.approx(want, rel=1e-6, abs=5e-3), key


def test_handmade_rank0_by_hand():
    """Compute [100,400] [500,650] [1250,1500]; communication [300,700] [1100,1300]; the GEMM launched
    in the last step is left out."""
    m = rank_metrics("handmade", read_trace(TRACES / "handmade" / "rank0_trace.json"))
    assert (m.compute_us, m.communication_us, m.overlap_us, m.exposed_comm_us) == (700, 600, 300, 300)
    assert (m.comp_comm_overlap_pct, m.span_us, m.idle_us, m.memory_us, m.kernels) == (50.0, 1400, 400, 50, 7)
    assert m.hideable_comm_us == 300  # compute 700 of which 300 already overlaps: 400 could hide 300 exposed
    (padded,) = m.padded_kernels  # the elementwise launch with 40 KiB more than its twin on stream 7
    assert (padded.pad_bytes, padded.padded_launches) == (40960, 1)
    assert (padded.resident_blocks_before, padded.resident_blocks_after) == (8, 5)


# --- interval arithmetic against a grid ---

intervals = st.lists(st.tuples(st.integers(0, 200), st.integers(1, 40)).map(lambda t: (t[0], t[0] + t[1])), max_size=12)


def _grid(ivs) -> np.ndarray:
    g = np.zeros(260, dtype=bool)
    for s, e in ivs:
        g[s:e] = True
    return g


@settings(max_examples=200, deadline=None)
@given(intervals, intervals)
def test_interval_arithmetic(a, b):
    ma, mb = merge(a), merge(b)
    assert length(ma) == _grid(a).sum()
    assert intersection(ma, mb) == (_grid(a) & _grid(b)).sum()
    diff = subtract(ma, mb)
    assert length(diff) == (_grid(a) & ~_grid(b)).sum() and (_grid(diff) == (_grid(a) & ~_grid(b))).all()


# --- the model ---

@pytest.mark.parametrize(("name", "cat", "kind"), [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", KernelClass.COMMUNICATION),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "kernel", KernelClass.COMMUNICATION),
    ("ncclSymkDevKernel_AllGather_LL(ncclSymkDevWorkArgs4K)", "kernel", KernelClass.COMMUNICATION),
    ("Memcpy DtoD (Device -> Device)", "gpu_memcpy", KernelClass.MEMORY),
    ("Memset (Device)", "gpu_memset", KernelClass.MEMORY),
    (ks.GEMM, "kernel", KernelClass.COMPUTE),
])
def test_kernel_classes(name, cat, kind):
    assert Classifier().classify(name, cat) is kind


def test_user_comm_regex(capsys):
    assert (Classifier.with_user_regex("^proxy_comm").classify("proxy_comm_kernel", "kernel")
            is KernelClass.COMMUNICATION)
    with pytest.raises(UsageError, match="--comm-regex"):
        Classifier.with_user_regex("(")
    code, out, _ = run(capsys, "analyze", TRACES / "handmade", "--comm-regex", "vectorized_elementwise", "--json", "-")
    rank0 = json.loads(out)["ranks"][0]
    assert code == 0 and rank0["compute_us"] == 550  # the elementwise [500,650] now counts as communication


def test_trace_model_reads_metadata_and_launches():
    t = read_trace(TRACES / "handmade" / "rank1_trace.json.gz")
    assert (t.rank, t.world_size, t.device["name"], len(t.kernels), len(t.steps)) == (1, 2, "NVIDIA H200", 5, 3)
    assert all(k.correlation in t.launches for k in t.kernels)
    nccl = next(k for k in t.kernels if k.kind is KernelClass.COMMUNICATION)
    assert (nccl.footprint.threads, nccl.footprint.regs, nccl.footprint.smem, nccl.stream) == (640, 96, 104832, 13)


def test_metadata_after_the_events_and_rank_from_the_file_name(tmp_path):
    kernels, steps = ks.random_run(5, 2)
    path = ks.write(tmp_path / "x.json", None, 1, kernels, steps)
    text = path.read_text().rstrip().rstrip("}")
    path.write_text(text + ', "distributedInfo": {"rank": 3, "world_size": 4}}\n')
    assert (read_trace(path).rank, read_trace(path).world_size) == (3, 4)
    named = ks.write(tmp_path / "rank5_trace.json", None, 1, kernels, steps)
    assert read_trace(named).rank == 5 and "file name" in read_trace(named).notes[0]


def test_device_limits_from_trace_properties():
    dev = device_limits(ks.H200_PROPS)
    assert (dev.sm_count == 132 and dev.smem_per_sm == PRESETS["h200"].smem_per_sm
            and dev.source == "trace deviceProperties")
    assert device_limits(None) is None and device_limits({"name": "Unknown", "computeMajor": 7}) is None


def test_window_keeps_everything_with_one_step(tmp_path):
    kernels, _ = ks.random_run(4, 2)
    t = read_trace(ks.write(tmp_path / "rank0.json", 0, 1, kernels, [(0, 10)]))
    assert analysed_kernels(t) == t.kernels


def test_last_step_starts_at_the_gpu_annotation_as_in_hta():
    """Real torch traces carry each ProfilerStep twice: the CPU user_annotation and the GPU-side
    gpu_user_annotation (no stream arg), which starts later. HTA reads the latter as a CPU event, so
    the last step starts there, and work launched in the last step before it (here the third
    all-reduce and the first matmul) still counts; recorded on 2x H200 (h200/default)."""
    t = read_trace(TRACES / "h200" / "default" / "rank0_trace.json.gz")
    starts = dict(sorted(t.steps, key=lambda s: s[1]))  # name -> latest start
    cpu_last = min(ts for name, ts in t.steps if name == "ProfilerStep#3")
    assert starts["ProfilerStep#3"] > cpu_last  # the GPU annotation of the last step comes later
    kept = analysed_kernels(t)
    late = [k for k in kept if t.launches[k.correlation].ts >= cpu_last]
    assert {k.kind for k in late} >= {KernelClass.COMMUNICATION, KernelClass.COMPUTE}
    assert all(t.launches[k.correlation].ts < starts["ProfilerStep#3"] for k in kept)
    assert len(kept) < len(t.kernels)


# --- baseline, slowdown, padding ---

def test_baseline_slowdown_and_padding():
    result = analyze(TRACES / "strategies", TRACES / "strategies" / "default")
    by = {(r.strategy, r.rank): r for r in result.ranks}
    assert set(by) == {("default", 0), ("default", 1), ("shaping", 0), ("shaping", 1)}
    assert by["default", 0].compute_slowdown == pytest.approx(1.0) and by["default", 0].padded_launches == 0
    shaping = by["shaping", 0]
    (padded,) = shaping.padded_kernels
    assert (padded.name == ks.ELEMENTWISE and padded.pad_bytes == 40960
            and padded.padded_launches == shaping.padded_launches > 0)
    # independent: per-name mean duration in the baseline, summed over this run's launches
    base = analysed_kernels(result.strategies["default"][0])
    mine = analysed_kernels(result.strategies["shaping"][0])
    for kind, attr in ((KernelClass.COMPUTE, "compute_slowdown"), (KernelClass.COMMUNICATION, "comm_slowdown")):
        names = {k.name for k in base if k.kind is kind}
        mean = {n: np.mean([k.dur for k in base if k.name == n]) for n in names}
        ours = [k for k in mine if k.kind is kind and k.name in mean]
        assert getattr(shaping, attr) == pytest.approx(sum(k.dur for k in ours) / sum(mean[k.name] for k in ours))
    # without a baseline every elementwise launch of 'shaping' has the same pad: nothing to compare with
    assert analyze(TRACES / "strategies" / "shaping").ranks[0].padded_launches == 0


def test_baseline_with_several_strategies_is_refused():
    with pytest.raises(UsageError, match="several strategies"):
        analyze(TRACES / "handmade", TRACES / "strategies")


def test_exposed_intervals_are_communication_minus_compute():
    t = read_trace(TRACES / "handmade" / "rank0_trace.json")
    assert exposed_intervals(analysed_kernels(t)) == [(400, 500), (650, 700), (1100, 1250)]


# --- CLI ---

def test_cli_json_is_the_only_stdout(capsys):
    code, out, err = run(capsys, "analyze", TRACES / "handmade", "--json", "-")
    data = json.loads(out)
    assert code == 0 and err == ""
    assert [(r["rank"], round(r["comp_comm_overlap_pct"], 2)) for r in data["ranks"]] == [(0, 50.0), (1, 28.57)]
    for key in ("exposed_comm_us", "compute_us", "idle_us", "communication_us", "compute_slowdown", "comm_slowdown",
                "padded_kernels"):
        assert key in data["ranks"][0]


def test_cli_json_strategy_means(capsys):
    code, out, _ = run(capsys, "analyze", TRACES / "strategies", "--baseline", TRACES / "strategies" / "default",
                       "--json", "-")
    data = json.loads(out)
    for name in ("default", "shaping"):
        ranks = [r for r in data["ranks"] if r["strategy"] == name]
        for key in ("comp_comm_overlap_pct", "exposed_comm_us", "compute_slowdown"):
            assert data["strategies"][name][key] == pytest.approx(sum(r[key] for r in ranks) / len(ranks))


def test_cli_text_table(capsys):
    code, out, _ = run(capsys, "analyze", TRACES / "strategies", "--baseline", TRACES / "strategies" / "default")
    assert code == 0 and "shaping" in out and "padded kernels" in out


def test_bad_files_one_line_each_and_the_rest_analysed(capsys):
    code, out, err = run(capsys, "analyze", TRACES / "bad", "--json", "-")
    assert code == 0 and [r["rank"] for r in json.loads(out)["ranks"]] == [0]
    lines = err.strip().splitlines()
    assert len(lines) == 6 and all(line.startswith("ccoverlap analyze: ") for line in lines)
    expect = {
        "notjson.json": "invalid or truncated JSON", "rank1_truncated.json": "invalid or truncated JSON",
        "rank2_nokernels.json": "no GPU kernels", "rank0_trace_copy.json.gz": "rank 0 again",
        "rank3_corrupt.json.gz": "truncated or corrupt gzip", "bad:": "missing rank(s) 1 (of 0-1)",  # world size 2
    }
    for name, why in expect.items():
        assert any(name in line and why in line for line in lines), name
    assert "Traceback" not in err


def test_nothing_analysable_exits_2(capsys, tmp_path):
    for name in ("notjson.json", "rank1_truncated.json", "rank2_nokernels.json"):
        (tmp_path / name).write_bytes((TRACES / "bad" / name).read_bytes())
    code, out, err = run(capsys, "analyze", tmp_path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 4
    assert err.strip().splitlines()[-1] == f"ccoverlap analyze: error: nothing could be analysed in {tmp_path}"


@pytest.mark.parametrize("make", [lambda p: p, lambda p: p / "missing"])
def test_empty_or_missing_dir_exits_2(capsys, tmp_path, make):
    code, _, err = run(capsys, "analyze", make(tmp_path))
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_report_is_self_contained_with_pngs(capsys, tmp_path):
    report = tmp_path / "out" / "report.html"
    code, _, _ = run(capsys, "analyze", TRACES / "strategies", "--baseline", TRACES / "strategies" / "default",
                     "--report", report)
    text = report.read_text()
    pngs = sorted((tmp_path / "out" / "report_files").iterdir())
    assert code == 0 and [p.name for p in pngs] == [
        "strategies.png", "timeline_default_rank0.png", "timeline_default_rank1.png",
        "timeline_shaping_rank0.png", "timeline_shaping_rank1.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in pngs)
    assert text.count("data:image/png;base64,") == 5 and "shaping, rank 1" in text and "src=\"report_files" not in text


def test_a_json_that_is_not_a_trace(tmp_path):
    (tmp_path / "results.json").write_text('{"median_ms": 4.2}')
    with pytest.raises(UsageError, match="not a Chrome trace"):
        read_trace(tmp_path / "results.json")


@pytest.mark.parametrize(("name", "short"), [
    ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
    (ks.ELEMENTWISE, "at::native::vectorized_elementwise_kernel<FillFunctor>"),
    (ks.NCCL, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
])
def test_short_kernel_names(name, short):
    assert short_name(name) == short


def test_parse_takes_less_memory_than_twice_the_file(tmp_path):
    """The file is decoded whole (msgspec), each event one at a time: 2x the file on a ~10 MB kernel-dense trace
    (docs/analysis.md, "Speed")."""
    import tracemalloc

    kernels, steps = ks.random_run(9, 1500)
    path = ks.write(tmp_path / "rank0_trace.json", 0, 1, kernels, steps)
    tracemalloc.start()
    trace = read_trace(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(trace.kernels) == len(kernels) and peak < 2 * path.stat().st_size


@pytest.mark.parametrize("enabled", [True, False])
def test_parse_leaves_the_cyclic_gc_as_it_found_it(tmp_path, enabled):
    """The parse turns the cyclic collector off while it streams (no cycles, millions of objects), and back on
    after, also when the file is refused."""
    import gc

    good = ks.write(tmp_path / "rank0_trace.json", 0, 1, *ks.random_run(2, 2))
    (tmp_path / "bad.json").write_text('{"traceEvents": [')
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        read_trace(good)
        assert gc.isenabled() is enabled
        with pytest.raises(UsageError):
            read_trace(tmp_path / "bad.json")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_record_traces_script_compiles():
    """It runs only on a GPU machine (bench/device); here, at least, it must compile."""
    script = Path(__file__).parents[1] / "bench" / "device" / "record_traces.py"
    compile(script.read_text(), str(script), "exec")


def test_unwritable_report_is_one_line(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run(capsys, "analyze", TRACES / "handmade", "--report", blocker / "report.html")
    assert code == 2 and err.strip().splitlines() == [  # refused before any trace is read
        f"ccoverlap analyze: error: --report {blocker / 'report.html'}: {blocker} is a file, not a directory"]


def test_kernels_without_a_launch_call_are_left_out_with_a_note(tmp_path):
    kernels, steps = ks.random_run(6, 3)
    path = ks.write(tmp_path / "rank0_trace.json", 0, 1, kernels, steps)
    doc = json.loads(path.read_text())
    nccl_corr = [100 + i for i, k in enumerate(kernels) if k.name == ks.NCCL]
    # drop the launch calls of the all-reduces, as a trace without driver calls would (a call there without its
    # correlation would be damage: the reader leaves it out and the rank gets no verdict)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not (
        e.get("cat") in ("cuda_runtime", "cuda_driver") and (e.get("args") or {}).get("correlation") in nccl_corr)]
    path.write_text(json.dumps(doc))
    result = analyze(tmp_path)
    (note,) = [p for p in result.problems if "no launch call" in p.message]
    assert f"{len(nccl_corr)} GPU kernel(s) (communication)" in note.message
    assert result.ranks[0].communication_us == 0 and result.ranks[0].comp_comm_overlap_pct is None


# --- the metric table: one declaration per metric, read by the JSON, the report and the terminal ---

PUBLISHED = Path(__file__).parents[1] / "bench" / "results" / "analyze-ddp-x2-h200-2026-11-30.json"


def test_metric_table_is_consistent():
    keys = [m.key for m in metrics.METRICS]
    positions = [m.column.position for m in metrics.METRICS if m.column]
    assert len(set(keys)) == len(keys) and len(set(positions)) == len(positions)
    assert all(m.unit in ("us", "ms", "%", "x", "") for m in metrics.METRICS)


#: Keys the contention doctor added to each rank (issue 13) after bench/results/analyze-* were published.
DOCTOR_METRICS = ["scheduling_headroom_ms", "compute_slowdown_beside_comm", "lever_headroom_ms"]
DOCTOR_KEYS = ["comm_kernels", "exposed_comm_breakdown_ms", "headroom_by_mechanism_ms", "steps", "recommendations",
               "verdict", "findings", "launch_marks", "lever_marks", "alone_us",
               "typical_steps", "left_out_steps", "compute_slowed"]


def test_json_keeps_the_published_key_order(capsys):
    """The committed results (bench/results/analyze-*) must still be what the code writes: same keys, same order,
    and the doctor's additions after them (its metrics after the published metrics, its lists at the end)."""
    published = json.loads(PUBLISHED.read_text())["analysis"]
    _, out, _ = run(capsys, "analyze", TRACES / "strategies", "--baseline", TRACES / "strategies" / "default",
                    "--json", "-", "--rows")
    data = json.loads(out)
    assert list(data) == ["schema", *published]  # the version of the document first (util/output.SCHEMA)
    old = list(published["ranks"][0])
    at = old.index("padded_kernels")
    assert list(data["ranks"][0]) == old[:at] + DOCTOR_METRICS + old[at:] + DOCTOR_KEYS
    _, out, _ = run(capsys, "analyze", TRACES / "strategies", "--baseline", TRACES / "strategies" / "default",
                    "--json", "-")
    counted = json.loads(out)["ranks"]  # without --rows: each list's length in its place, everything else the same
    rows = {"comm_kernels": "comm_kernel_count", "steps": "step_count"}
    assert [list(r) for r in counted] == [[rows.get(k, k) for k in r] for r in data["ranks"]]
    assert [[r[rows[k]] for k in rows] for r in counted] == [[len(r[k]) for k in rows] for r in data["ranks"]]
    assert list(data["strategies"]["default"]) == list(next(iter(published["strategies"].values()))) + DOCTOR_METRICS
    (padded,) = [r for r in data["ranks"] if r["padded_kernels"]][:1]
    (published_padded,) = [r for r in published["ranks"] if r["padded_kernels"]][:1]
    assert list(padded["padded_kernels"][0]) == list(published_padded["padded_kernels"][0])


def _outputs(capsys, tmp_path) -> tuple[dict, str, list[str]]:
    """--json, the report's HTML and the terminal table's headers, on the strategies fixture with its baseline."""
    args = (TRACES / "strategies", "--baseline", TRACES / "strategies" / "default")
    _, out, _ = run(capsys, "analyze", *args, "--json", "-", "--report", tmp_path / "r.html")
    _, text, _ = run(capsys, "analyze", *args)
    header = next(row for row in table_rows(text) if row[0] == "strategy")  # the table's header, its cells whole
    return json.loads(out), (tmp_path / "r.html").read_text(), header


def test_every_metric_of_the_table_is_in_every_output(capsys, tmp_path):
    data, report, terminal = _outputs(capsys, tmp_path)
    for m in metrics.METRICS:
        assert all(m.key in r for r in data["ranks"]), m.key
        if m.combine:
            assert all(m.key in s for s in data["strategies"].values()), m.key
        if m.column:
            assert f"<th>{html.escape(m.column.header)}</th>" in report, m.key
    assert terminal == ["strategy", "rank", "overlap%", "comm", "exposed", "compute", "idle", "comp x", "comm x",
                        "padded"]
    assert terminal[2:] == [m.column.short for m in metrics.shown(terminal=True)]


def test_a_metric_added_to_the_table_shows_everywhere(capsys, tmp_path, monkeypatch):
    longest = metrics.Metric("longest_kernel_us", "longest kernel", "us", ".3f",
                             lambda r: max(k.dur for k in r.kernels),
                             max, metrics.Column(11, "longest kernel ms", "longest"))
    monkeypatch.setattr(metrics, "METRICS", (*metrics.METRICS, longest))
    data, report, terminal = _outputs(capsys, tmp_path)
    for r in data["ranks"]:
        path = Path(r["file"])
        assert r["longest_kernel_us"] == max(k.dur for k in analysed_kernels(read_trace(path)))
        assert list(r)[-len(DOCTOR_KEYS) - 2:-len(DOCTOR_KEYS)] == ["longest_kernel_us", "padded_kernels"]
    for name, s in data["strategies"].items():  # combined by max, not the mean
        assert s["longest_kernel_us"] == max(r["longest_kernel_us"] for r in data["ranks"] if r["strategy"] == name)
    assert "<th>longest kernel ms</th>" in report
    assert f"<td>{data['ranks'][0]['longest_kernel_us'] / 1000:.3f}</td>" in report
    assert terminal[-1] == "longest"


def test_metric_values_as_shown():
    pct, comm, padded = (metrics.metric(k) for k in ("comp_comm_overlap_pct", "communication_us", "padded_launches"))
    assert (pct.show(53.991), comm.show(22331.5669), padded.show(3), comm.show(None)) == ("53.99", "22.332", "3", "-")


# --- hardening: bad times, foreign JSON, missing ranks, a full disk ---

def _trace_with(tmp_path: Path, edit, name: str = "rank0_trace.json", rank: int = 0, world: int = 1) -> Path:
    """A synthetic trace whose events `edit` changes (in place) before it is written."""
    kernels, steps = ks.random_run(3, 3)
    path = ks.write(tmp_path / name, rank, world, kernels, steps)
    data = json.loads(path.read_text())
    edit(data["traceEvents"])
    path.write_text(json.dumps(data))
    return path


def _first(events: list[dict], cat: str, name: str | None = None) -> dict:
    return next(e for e in events if e.get("cat") == cat and (name is None or e.get("name") == name))


@pytest.mark.parametrize(("cat", "field", "value", "why"), [
    ("kernel", "dur", -5.0, "1 GPU event(s) with a negative dur (first: {name} at ts {ts})"),
    ("kernel", "dur", "nan",
     "1 GPU event(s) with a dur that is not a finite number ('nan') (first: {name} at ts {ts})"),
    ("kernel", "dur", 0, "1 GPU event(s) with a zero dur (first: {name} at ts {ts})"),
    ("kernel", "dur", 1e30, "1 GPU event(s) longer than 1 h (first: {name} at ts {ts})"),
    ("kernel", "ts", 1e30, "1 GPU event(s) that start more than 1 h from the rank's other GPU events (first: {name} "
                           "at ts 1e+30)"),
    ("kernel", "ts", True, "1 GPU event(s) whose ts is not a finite number (True) (first: {name} at ts True)"),
    ("kernel", "ts", "-inf", "1 GPU event(s) whose ts is not a finite number ('-inf') (first: {name} at ts '-inf')"),
    ("cuda_runtime", "ts", "nan", "1 CPU event(s) (calls with a correlation) whose ts or correlation is not a number "
                                  "(first: {name} at ts 'nan')"),
    ("user_annotation", "ts", "inf", "1 CPU event(s) (ProfilerStep annotations) whose ts is not a finite number "
                                     "(first: {name} at ts 'inf')"),
], ids=["negative-dur", "nan-dur", "zero-dur", "huge-dur", "huge-ts", "bool-ts", "inf-ts", "nan-launch-ts",
        "inf-step-ts"])
def test_an_event_with_an_impossible_time_is_left_out_and_its_rank_loses_its_verdict(capsys, tmp_path, cat, field,
                                                                                     value, why):
    """Negative, zero, non-finite or impossible times would give wrong times: the event is left out, one line
    naming the file, the event and its time; past LEFT_OUT_SHARE (one event of these few is) the rank gets no
    verdict (exit 2 when no rank is left)."""
    seen = {}

    def edit(events):
        ev = _first(events, cat, ks.NCCL if cat == "kernel" else None)
        seen.update(name=repr(ev["name"][:57] + "..." if len(ev["name"]) > 60 else ev["name"]), ts=float(ev["ts"]))
        ev[field] = value

    path = _trace_with(tmp_path, edit)
    before = path.read_bytes()
    code, out, err = run(capsys, "analyze", tmp_path)
    assert code == 2 and out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert f"ccoverlap analyze: {path}: left out: {why.format(**seen)}" in lines
    assert lines[-2].startswith(f"ccoverlap analyze: {path}: skipped, no verdict: ")
    assert lines[-1] == f"ccoverlap analyze: error: nothing could be analysed in {tmp_path}"
    assert path.read_bytes() == before


def test_a_refused_trace_leaves_the_others_analysed(capsys, tmp_path):
    def negative(events):
        _first(events, "kernel", ks.NCCL)["dur"] = -1.0

    _trace_with(tmp_path, negative, "rank1_trace.json", rank=1, world=2)
    _trace_with(tmp_path, lambda events: None, "rank0_trace.json", rank=0, world=2)
    code, out, err = run(capsys, "analyze", tmp_path, "--json", "-")
    data = json.loads(out)
    assert code == 0 and [r["rank"] for r in data["ranks"]] == [0]
    assert all(r["communication_us"] >= 0 and r["exposed_comm_us"] >= 0 for r in data["ranks"])
    assert "rank1_trace.json: left out: 1 GPU event(s) with a negative dur" in err
    assert "rank1_trace.json: skipped, no verdict: 1 of " in err and data["missing_ranks"] == {tmp_path.name: [1]}


@pytest.mark.parametrize(("content", "why"), [
    ('{"traceEvents": [1, "x"]}', "malformed trace event"),
    ('{"traceEvents": [{"ph": "X", "dur": 1, "ts": 1, "args": [1]}]}', "malformed trace event"),
    ('[1, 2, 3]', "not a Chrome trace: no traceEvents"),
    ('{"median_ms": 4.2}', "not a Chrome trace: no traceEvents"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "args": {"stream": 7}}',
     "invalid or truncated JSON"),
    ("half a gzip", "truncated or corrupt gzip"),
], ids=["events-not-objects", "args-not-an-object", "a-list", "other-json", "truncated", "truncated-gz"])
def test_a_foreign_or_truncated_file_is_one_line(capsys, tmp_path, content, why):
    if content == "half a gzip":
        data = (TRACES / "handmade" / "rank1_trace.json.gz").read_bytes()
        path = tmp_path / "rank0_trace.json.gz"
        path.write_bytes(data[: len(data) // 2])
    else:
        path = tmp_path / "rank0_trace.json"
        path.write_text(content)
    code, out, err = run(capsys, "analyze", tmp_path, "--json", "-")
    lines = err.splitlines()
    assert code == 2 and out == "" and "Traceback" not in err and len(lines) == 1
    assert lines[0].startswith(f"ccoverlap analyze: error: {path}: skipped: {why}")
    assert lines[0].endswith(f"; nothing could be analysed in {tmp_path}")


def test_metadata_of_the_wrong_shape_is_ignored(tmp_path):
    kernels, steps = ks.random_run(3, 2)
    path = ks.write(tmp_path / "rank4_trace.json", None, 1, kernels, steps)
    text = path.read_text().replace('"deviceProperties": [', '"distributedInfo": 3, "deviceProperties": [7, ', 1)
    path.write_text(text)
    trace = read_trace(path)
    assert (trace.rank, trace.world_size, trace.device["name"]) == (4, None, "NVIDIA H200")


@pytest.mark.parametrize(("present", "world", "missing", "line"), [
    ([0, 2], None, [1], "missing rank(s) 1 (of 0-2)"),  # no distributedInfo: ranks from the file names
    ([0, 1, 3], 4, [2], "missing rank(s) 2 (of 0-3)"),
    ([0], 8, [1, 2, 3, 4, 5, 6, 7], "missing rank(s) 1-7 (of 0-7)"),
    ([1, 3], 6, [0, 2, 4, 5], "missing rank(s) 0, 2, 4-5 (of 0-5)"),
])
def test_missing_ranks_are_named(capsys, tmp_path, present, world, missing, line):
    kernels, steps = ks.random_run(3, 2)
    for rank in present:
        ks.write(tmp_path / "run" / f"rank{rank}_trace.json", None if world is None else rank, world or 1,
                 kernels, steps)
    code, out, err = run(capsys, "analyze", tmp_path / "run", "--json", "-")
    data = json.loads(out)
    assert code == 0 and [r["rank"] for r in data["ranks"]] == present and data["missing_ranks"] == {"run": missing}
    (warning,) = [x for x in err.splitlines() if "missing rank" in x]
    assert warning == f"ccoverlap analyze: {tmp_path / 'run'}: {line}: no usable trace, left out of every figure"
    assert warning.split(": ", 1)[1] in data["problems"]


def test_no_missing_ranks_no_key(capsys):
    _, out, err = run(capsys, "analyze", TRACES / "h200", "--json", "-")
    assert "missing_ranks" not in json.loads(out) and "missing" not in err


def _full_disk_after(monkeypatch, writes: int) -> None:
    """Every file write after the first `writes` fails half-way with ENOSPC, as on a full disk."""
    real, count = Path.write_bytes, [0]

    def write_bytes(self, data):
        count[0] += 1
        if count[0] > writes:
            real(self, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)


@pytest.mark.parametrize("earlier", [False, True], ids=["first-report", "over-an-earlier-report"])
def test_report_on_a_full_disk_leaves_no_half_report(capsys, tmp_path, monkeypatch, earlier):
    out = tmp_path / "out"
    report = out / "report.html"
    if earlier:
        assert run(capsys, "analyze", TRACES / "handmade", "--report", report)[0] == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    _full_disk_after(monkeypatch, 2)  # the third PNG fails
    code, stdout, err = run(capsys, "analyze", TRACES / "strategies", "--report", report)
    assert code == 1 and stdout == "" and "Traceback" not in err
    assert err.splitlines() == [
        f"ccoverlap analyze: error: cannot write {report}: [Errno 28] No space left on device (ENOSPC)"]
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # nothing new, nothing cut
    assert sorted(p.name for p in out.iterdir()) == (["report.html", "report_files"] if earlier else [])


def test_report_replaces_an_earlier_one_whole(capsys, tmp_path):
    report = tmp_path / "report.html"
    run(capsys, "analyze", TRACES / "strategies", "--report", report)
    code, _, _ = run(capsys, "analyze", TRACES / "handmade", "--report", report)
    assert code == 0 and sorted(p.name for p in (tmp_path / "report_files").iterdir()) == [
        "strategies.png", "timeline_handmade_rank0.png", "timeline_handmade_rank1.png"]  # none of the first report's
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report_files"]  # no temporary folder left
