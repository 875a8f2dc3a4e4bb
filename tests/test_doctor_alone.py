"""The doctor's measured alone-times and what they feed (CPU): the capture's alone window (with a fake profiler and
a fake interposer switch), the step record, the launch-by-launch matching of the two windows, the replay by
mechanism, the green-context and cluster marks from the interposer's stats, the misconfiguration rules, the
levers' marks and the tuner's "no effect"."""
from __future__ import annotations

import json

import pytest

import kineto_synth as ks
from ccoverlap.control import levers
from ccoverlap.control.interposer import LaunchStats
from ccoverlap.doctor import capture, record
from ccoverlap.analysis import Process, analyze
from ccoverlap.analysis.alone import match, with_alone
from ccoverlap.analysis.contention import diagnose
from ccoverlap.analysis.mechanisms.base import Cause
from ccoverlap.analysis.metrics import rank_metrics
from ccoverlap.analysis.recommend import verdict
from ccoverlap.analysis.rules import findings
from ccoverlap.analysis.reader import read_trace
from ccoverlap.doctor.config import DoctorConfig
from hta_reference import TRACES
from test_analysis import good_trace_files
from test_analysis_doctor import NCCL, _random_traces, alone_window

STATS = dict(files=1, launches=10, comm_launches=2, comm_priorities=frozenset({0}), comm_clusters=frozenset({4}),
             comm_grid=(16, 16), comm_threads=(640, 640), padded=0, carveout_set=0, comm_carveout_set=0,
             cooperative=frozenset(), sm_limits={}, serialized=0)


def stats(**kw) -> LaunchStats:
    return LaunchStats(**(STATS | kw))


# --- the capture: window, then alone window, every launch serialized in it ---

class FakeRecorder:
    """profiling.Recorder's shape: after `warmup` steps and `active` recorded ones, the trace is written."""

    def __init__(self, path, cuda, warmup=1, active=3):
        self.path, self.left, self.written = path, warmup + active, False

    def start(self):
        pass

    def step(self):
        self.left -= 1
        if self.left == 0:
            self.path.write_text("{}")
            self.written = True
        return self.written

    def stop(self):
        return self.written


def test_the_alone_window_follows_the_window_with_launches_serialized(tmp_path, monkeypatch):
    from ccoverlap.control import interposer

    switched = []
    monkeypatch.setattr(capture.profiling, "Recorder", FakeRecorder)
    monkeypatch.setattr(capture, "_cuda_in_use", lambda: True)
    monkeypatch.setattr(capture, "_event", lambda: None)
    monkeypatch.setattr(interposer, "set_serialize", lambda on: switched.append(on) or (not on))
    c = capture.Capture(DoctorConfig(out=str(tmp_path), skip=2, steps=3).capture())
    opt = FakeRecorder  # any object an optimizer's weak reference can point to
    for _ in range(12):
        c.pre_step(opt, (), {})
        c.post_step(opt, (), {})
    assert switched == [True, False]  # on for the alone window only
    r = record.read(next(tmp_path.glob("*_steps.jsonl")))
    assert [s.step for s in r.steps if s.profiled] == [3, 4, 5]
    assert [s.step for s in r.steps if s.alone] == [6, 7, 8, 9]  # its warm-up step, then its 3 steps
    # step 10 starts after the alone trace's export (host and GPU cold: measured 1.2-1.9x a steady step on one H100)
    assert [s.step for s in r.steps if s.after_window] == [10]
    assert [s.step for s in r.steps if s.outside] == [1, 11, 12]
    assert r.trace.name == "rank0_trace.json.gz" and r.alone_trace.name == "rank0_trace.alone.gz"
    assert r.alone_trace.exists() and r.alone_note is None
    assert all(t is not None and t >= 0 for t in r.window_s)
    assert r.summary()["alone_ms"]["n"] == 4


def test_without_the_interposer_there_is_no_alone_window_and_the_record_says_why(tmp_path, monkeypatch):
    from ccoverlap.control import interposer

    monkeypatch.setattr(capture.profiling, "Recorder", FakeRecorder)
    monkeypatch.setattr(capture, "_cuda_in_use", lambda: True)
    monkeypatch.setattr(capture, "_event", lambda: None)
    monkeypatch.setattr(interposer, "set_serialize", lambda on: None)  # not preloaded
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    c = capture.Capture(DoctorConfig(out=str(tmp_path), skip=2, steps=3).capture())
    for _ in range(8):
        c.pre_step(FakeRecorder, (), {})
        c.post_step(FakeRecorder, (), {})
    r = record.read(next(tmp_path.glob("*_steps.jsonl")))
    assert r.alone_trace is None and "not loaded" in r.alone_note and not any(s.alone for s in r.steps)
    assert r.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}  # the scheduling variables, for the rules


def test_alone_off_records_one_window(tmp_path, monkeypatch):
    monkeypatch.setattr(capture.profiling, "Recorder", FakeRecorder)
    monkeypatch.setattr(capture, "_cuda_in_use", lambda: True)
    monkeypatch.setattr(capture, "_event", lambda: None)
    c = capture.Capture(DoctorConfig(out=str(tmp_path), skip=2, steps=3, alone="off").capture())
    for _ in range(8):
        c.pre_step(FakeRecorder, (), {})
        c.post_step(FakeRecorder, (), {})
    r = record.read(next(tmp_path.glob("*_steps.jsonl")))
    assert r.alone_trace is None and r.alone_note is None and not any(s.alone for s in r.steps)


def test_alone_is_on_or_off():
    from ccoverlap.util.errors import UsageError

    with pytest.raises(UsageError, match="--alone maybe: valid on, off"):
        DoctorConfig(alone="maybe").validate()


def test_the_doctor_preloads_the_interposer_in_pass_through(tmp_path):
    from ccoverlap.control.interposer import library_path, parse
    from ccoverlap.doctor.session import observed

    launch, why = observed(DoctorConfig(comm_regex="^comm_paced$"), tmp_path)
    env = launch.environ({"LD_PRELOAD": "/x/alloc.so"})
    assert why is None and env["LD_PRELOAD"] == f"{library_path()} /x/alloc.so"
    policy = parse(env)
    assert policy["mode"] == "off" and policy["carveout"] is None  # no pad, no hint
    assert policy["stats"] == str(tmp_path.resolve() / "interposer-%p.stats") and policy["comm"] == "^comm_paced$"


# --- matching the two windows, launch by launch ---

def _pair(tmp_path, kernels, alone_kernels, name="rank0_trace.json"):
    trace = read_trace(ks.write(tmp_path / name, 0, 1, kernels, []))
    alone = read_trace(ks.write(tmp_path / (name + ".alone"), 0, 1, alone_kernels, []))
    return trace, alone


def _two_streams():
    return [ks.K("compute_a", 100, 50, launch_ts=90), ks.K(ks.NCCL, 120, 300, launch_ts=100, **NCCL),
            ks.K("compute_a", 160, 500, launch_ts=110), ks.K("compute_b", 700, 40, launch_ts=120, grid=64)]


def test_each_launch_gets_its_own_alone_time(tmp_path):
    kernels = _two_streams()
    trace, alone = _pair(tmp_path, kernels, alone_window(kernels, [45, 250, 480, 40]))
    m = match(trace, alone)
    assert (m.launches, m.matched, m.unmatched, m.first) == (4, 4, 0, None)
    by_name = {(k.name, k.ts): m.alone_us[k.correlation] for k in trace.kernels}
    assert by_name[("compute_a", 100)] == 45 and by_name[("compute_a", 160)] == 480  # one name, two works
    assert with_alone(trace, alone)[0].alone_us == m.alone_us


@pytest.mark.parametrize("change, first", [
    (lambda ks_: ks_[:3], "stream 7: 3 launch(es), 2 in the alone window"),
    (lambda ks_: [*ks_[:3], ks.K("other", 700, 40, launch_ts=120, grid=64)], "compute_b grid 64, alone other grid 64"),
    (lambda ks_: [*ks_[:3], ks.K("compute_b", 700, 40, launch_ts=120, grid=32)],
     "compute_b grid 64, alone compute_b grid 32"),
])
def test_a_mismatch_is_counted_named_and_left_unknown(tmp_path, change, first):
    kernels = _two_streams()
    trace, alone = _pair(tmp_path, kernels, alone_window(change(kernels)))
    m = match(trace, alone)
    assert m.unmatched >= 1 and first in m.first
    assert "not matched" in m.note()
    assert len(m.alone_us) == m.launches - m.unmatched


def test_a_launch_that_overlapped_another_in_the_alone_window_is_unknown(tmp_path):
    kernels = _two_streams()
    serial = alone_window(kernels)
    serial[1].ts = serial[0].ts + 10  # the collective ran beside the first kernel: not alone
    trace, alone = _pair(tmp_path, kernels, serial)
    m = match(trace, alone)
    assert m.unmatched == 2 and "did not run alone" in m.first


def test_the_analysis_reads_the_alone_window_beside_a_trace(tmp_path, capsys):
    from ccoverlap.cli import main

    kernels = _two_streams()
    ks.write(tmp_path / "rank0_trace.json", 0, 1, kernels, [])
    ks.write(tmp_path / "rank0_trace.alone.gz", 0, 1, alone_window(kernels), [])
    result = analyze(tmp_path)
    assert list(result.strategies) == [tmp_path.name] and result.ranks[0].alone_us  # not a trace of its own
    assert main(["analyze", str(tmp_path), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["alone_windows"] == [{"strategy": tmp_path.name, "rank": 0, "launches": 4, "matched": 4,
                                     "unmatched": 0, "first_unmatched": None, "steps": [1, 1]}]
    assert len(doc["ranks"][0]["alone_us"]) == 4


# --- the replay: measured waits give the measured schedule back ---

def test_replaying_with_nothing_removed_gives_the_measured_end(tmp_path):
    for path in good_trace_files() + _random_traces(tmp_path):
        d = rank_metrics("s", read_trace(path)).diagnosis
        for r in d.replays:
            assert r.end(frozenset(), {}) == pytest.approx(r.measured_end, abs=1e-6), path
        assert d.gain_us([]) == 0


# --- the interposer's stats in the diagnosis: green contexts, clusters ---

def _green_case(tmp_path):
    compute = ks.K("known_green", 100, 2000, block=256, grid=116 * 8, regs=16, launch_ts=90)
    comm = ks.K(ks.NCCL, 2100, 1000, launch_ts=150, **NCCL)
    return read_trace(ks.write(tmp_path / "rank0_trace.json", 0, 1, [compute, comm], []))


def test_compute_in_a_green_context_leaves_sms_idle_and_clusters_the_cause(tmp_path):
    trace = _green_case(tmp_path)
    plain = diagnose({0: trace})[0].comm[0]
    assert plain.cause is Cause.THREADS  # the trace alone: its 928 blocks cover every SM
    told = diagnose({0: trace}, processes={0: Process(stats(sm_limits={"known_green": 116}))})[0]
    assert told.comm[0].cause is Cause.CLUSTER and not any("was assumed" in n for n in told.notes)  # observed: 4
    assert [r.lever for r in verdict([told]).recommendations] == ["nccl-cluster=1"]
    ones = diagnose({0: trace}, processes={0: Process(stats(sm_limits={"known_green": 116},
                                                                   comm_clusters=frozenset({1})))})[0]
    assert ones.comm[0].cause is Cause.UNKNOWN  # clusters of 1 would have fit on the idle SMs: something else


def test_mangled_names_in_the_stats_meet_the_traces_demangled_ones():
    from ccoverlap.util.demangle import demangled

    assert demangled("_Z3fooi") == "foo(int)" and demangled("known_green") == "known_green"


# --- rules ---

def _serial_case(tmp_path):
    """A 6-wave grid and a collective that fits beside it but never ran beside it."""
    grid = ks.K("padded_kernel", 100, 6000, block=256, grid=6 * 2 * 132, regs=16, smem=100000, launch_ts=90)
    comm = ks.K("ncclDevKernel_SendRecv", 6100, 1500, stream=13, block=256, grid=16, regs=32, smem=16384,
                launch_ts=990, launch_dur=10)
    return read_trace(ks.write(tmp_path / "rank0_trace.json", 0, 1, [grid, comm], []))


def test_comm_and_compute_that_never_overlap_although_they_could(tmp_path):
    trace = _serial_case(tmp_path)
    d = diagnose({0: trace})[0]
    (f,) = findings(trace, d, overlap_us=0.0)
    assert f.rule == "serialized_streams" and "never ran at the same time" in f.says
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1 does" in f.change
    (f,) = findings(trace, d, overlap_us=0.0, env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1 is set: unset it" in f.change
    assert findings(trace, d, overlap_us=100.0) == ()  # they did overlap


def test_no_rule_fires_behind_unresolved_waits():
    """The real 2 x H200 traces have no CUDA sync events: every wait is unresolved, and no rule reads them."""
    result = analyze(TRACES / "h200" / "default")
    assert result.ranks and all(r.findings == () for r in result.ranks)


# --- the levers' marks, and the tuner's "no effect" ---

@pytest.mark.parametrize("lever, seen, expected", [
    ("priority", stats(comm_priorities=frozenset({-5, 0})), True),
    ("priority", stats(), False),
    ("priority", stats(comm_launches=0, comm_priorities=frozenset()), None),  # no collective: cannot tell
    ("nccl-ctas=4", stats(comm_grid=(4, 4)), True),
    ("nccl-ctas=4", stats(), False),  # NCCL kept 16 CTAs
    ("nccl-cluster=1", stats(comm_clusters=frozenset({1})), True),
    ("nccl-cluster=1", stats(), False),
    ("nccl-threads", stats(comm_threads=(288, 288)), True),
    ("nccl-threads", stats(), False),  # send/recv keeps 640
    ("shape", stats(padded=3), True),
    ("shape", stats(), False),
    ("carveout-hint", stats(carveout_set=2), True),
    ("comm-carveout-hint", stats(comm_carveout_set=1), True),
    ("comm-carveout-hint", stats(carveout_set=2), False),  # compute hinted: not this lever's mark
    ("sm-carveout", stats(), None),  # no mark the interposer can see
    ("max-connections", stats(), None),
])
def test_a_levers_mark_is_read_off_the_launches(lever, seen, expected):
    (name, value), = levers.strategy(lever).levers
    assert levers.took_effect([(name, value)], seen) == {name: expected}
    assert levers.took_effect([(name, value)], None) == {name: None}


def test_the_doctor_says_which_levers_are_in_effect():
    seen = levers.marks_seen(stats(comm_priorities=frozenset({-5}), comm_clusters=frozenset({1}), padded=2))
    assert seen == {"priority": True, "shape": True, "carveout-hint": False, "comm-carveout-hint": False,
                    "green": False, "nccl-cluster": True, "nccl-ctas": False, "nccl-threads": False}
    assert levers.marks_seen(None) == dict.fromkeys(seen)


def test_every_lever_with_a_mark_says_what_it_is():
    marked = {lv.name for lv in levers.LEVERS if lv.mark}
    assert marked == {"priority", "shape", "carveout-hint", "comm-carveout-hint", "green", "nccl-cluster", "nccl-ctas",
                      "nccl-threads"}
    assert all(lv.mark.what for lv in levers.LEVERS if lv.mark)


# --- what torch 2.11's traces leave out: which event a stream waited for ---

def _ambiguous(tmp_path, late_record: bool):
    """torch 2.11 names no record for a wait, so the thread's latest record is taken. A 100 us kernel A, then a
    2 ms grid G of 10 waves on stream 7; the collective waits for A's event and starts as G's last wave retires; the
    optimizer's kernel (stream 7) waits for the collective. `late_record`: a record after G (which nobody waits for)
    comes between A's record and the collective's wait; else a kernel B, launched on stream 7 after the
    collective and recorded, comes between the collective's record and the optimizer's wait."""
    a = ks.K("known_compute", 100, 100, launch_ts=80, launch_dur=5)
    g = ks.K("known_wide", 201, 2000, block=1024, grid=132 * 2 * 10, launch_ts=95, launch_dur=5)
    comm = ks.K(ks.NCCL, 2150, 1000, launch_ts=125, launch_dur=5, **NCCL)
    b = ks.K("known_tail", 2202, 10, launch_ts=133, launch_dur=2)
    sgd = ks.K("sgd_kernel", 3152, 10, launch_ts=150, launch_dur=5)
    rec_a = ks.Call("cudaEventRecordWithFlags", 90, 1)
    rec_g = ks.Call("cudaEventRecordWithFlags", 101 if late_record else 91, 1)
    wait_comm = ks.Call("cudaStreamWaitEvent", 120, 1)
    rec_comm, rec_b = ks.Call("cudaEventRecordWithFlags", 131, 1), ks.Call("cudaEventRecordWithFlags", 136, 1)
    wait_sgd = ks.Call("cudaStreamWaitEvent", 142, 1)
    calls = [rec_a, rec_g, wait_comm, rec_comm, wait_sgd] + ([] if late_record else [rec_b])
    waits = [ks.Wait(wait_comm, 13, event_id=1), ks.Wait(wait_sgd, 7, event_id=3)]
    kernels = [a, g, comm, sgd] + ([] if late_record else [b])
    return read_trace(ks.write(tmp_path / "rank0_trace.json", 0, 1, kernels, [], calls=calls, waits=waits))


def test_the_latest_record_whose_producer_could_have_been_waited_for(tmp_path):
    """G's record is the latest before the collective's wait, but G ends after the collective started: not what it
    waited for. The record before it (A's) is: the collective was ready at 200 and waited 1.95 ms for SMs."""
    d = diagnose({0: _ambiguous(tmp_path, late_record=True)})[0]
    (c,) = d.comm
    assert c.ready_us == 200 and c.ready_by == "event" and not c.unresolved
    assert c.cause is Cause.THREADS and c.blocked_by[0] == "known_wide"
    assert [r.lever for r in verdict([d]).recommendations] == ["priority"]  # G is a grid of 10 waves


def test_a_start_right_after_another_streams_kernel_is_taken_as_waiting_for_it(tmp_path):
    """The optimizer's wait is matched to B's record (the latest, and plausible), on its own stream: its measured
    940 us start delay would be kept in the replay, and removing the collective's wait would gain nothing. It
    started 2 us after the collective ended, so it is taken to have waited for it: the replay moves it along."""
    trace = _ambiguous(tmp_path, late_record=False)
    d = diagnose({0: trace})[0]
    (step,) = d.replays
    at = {trace.kernels[i].name: n for n, i in enumerate(step.index)}
    assert at[ks.NCCL] in step.nodes[at["sgd_kernel"]][2] and step.nodes[at["sgd_kernel"]][4] == pytest.approx(2)
    # the collective from 200 to 1200; the optimizer after B (2202-2212) and its own 2 us: ends 2224, not 3162
    assert d.headroom_ms == pytest.approx(0.938)
