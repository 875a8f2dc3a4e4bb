"""Compute slowed beside a collective that started late, priced by the capture's own steps
(`analysis/mechanisms/late_start.py`): where a step of the same launch sequence ran the collective at its ready
time, the compute beside it takes its time there and the collective its ready time; priority is named at that
replay's gain. Hand-built steps with hand-computed answers."""
from __future__ import annotations

import pytest

import kineto_synth as ks
from ccoverlap.analysis.alone import with_alone
from ccoverlap.analysis.contention import diagnose
from ccoverlap.analysis import recommend
from ccoverlap.analysis.mechanisms import compute_slowed, late_start
from ccoverlap.analysis.mechanisms.base import Cause
from ccoverlap.analysis.recommend import verdict
from ccoverlap.analysis.reader import read_trace
from test_analysis_doctor import NCCL

COPY = "Memcpy DtoD (Device -> Device)"
STEP_US = 2000


def _step(n: int, calm: bool, beside_us: float) -> list[ks.K]:
    """One step, launched copy, histogram, collective (in that order, 5 us apart). Calm: the collective starts at
    its ready time (b - 5: its launch call's end) and the copy after it; late: the copy runs first and the collective
    starts as it ends, 97 us after its ready time (no compute kernel beside the wait: cause unknown), and the
    histogram, queued behind the copy, runs `beside_us` beside it."""
    b = STEP_US * n + 100
    copy = dict(cat="gpu_memcpy", launch_ts=b - 20, launch_dur=5)
    hist = dict(launch_ts=b - 15, launch_dur=5)
    comm = dict(launch_ts=b - 10, launch_dur=5, **NCCL)
    if calm:
        return [ks.K(COPY, b + 2, 100, **copy), ks.K("histogram_kernel", b + 105, 150, **hist),
                ks.K(ks.NCCL, b, 300, **comm)]
    return [ks.K(COPY, b - 8, 100, **copy), ks.K("histogram_kernel", b + 95, beside_us, **hist),
            ks.K(ks.NCCL, b + 92, 300, **comm)]


def _kernels(calm: set[int], beside_us: float = 600.0, steps: int = 5) -> list[ks.K]:
    """`steps` steps (the last cut short by the profiler, not analysed), those in `calm` calm."""
    return [k for n in range(steps) for k in _step(n, n in calm, beside_us)]


def _diagnose(tmp_path, kernels: list[ks.K]):
    """The steps of `kernels` (3 a step) with an alone window of the same steps: the histogram 150 us alone."""
    steps = len(kernels) // 3
    trace = read_trace(ks.write(tmp_path / "rank0_trace.json", 0, 1, kernels,
                                [(STEP_US * n, STEP_US) for n in range(steps)]))
    alone, t, spans = [], 100_000.0, []
    for n in range(steps):
        start = t
        for k in kernels[3 * n:3 * n + 3]:
            dur = {"histogram_kernel": 150.0, ks.NCCL: 300.0}.get(k.name, 100.0)
            alone.append(ks.K(**{**vars(k), "ts": t, "dur": dur, "launch_ts": t - 8}))
            t += dur + 20
        spans.append((start - 10, t - start))
    trace, _ = with_alone(trace, read_trace(ks.write(tmp_path / "alone.json", 0, 1, alone, spans)))
    return diagnose({0: trace})[0]


def test_a_step_where_the_collective_started_at_its_ready_time_prices_priority(tmp_path):
    """Steps 2-4: the collective waited 97 us (cause unknown) and the histogram beside it ran 600 us (4x alone);
    step 1: started at its ready time, the histogram ran 150 us. Replayed with the collective at its ready time and
    the histogram at 150 us, a late step ends at the collective's end, b + 92 + 300 = b + 392 (the copy before it,
    a kernel of another stream ending just as it started, stays its dependency: only a named cause's wait moves it),
    against the histogram's measured end b + 95 + 600 = b + 695: 0.303 ms sooner."""
    d = _diagnose(tmp_path, _kernels(calm={0}))
    assert [c.cause for c in d.comm] == [Cause.NONE] + [Cause.UNKNOWN] * 3
    m = late_start.price(d)
    assert m is not None and len(m.waits) == 3 and sorted(m.durations.values()) == [150.0] * 3
    v = verdict([d])
    top = v.recommendations[0]
    assert top.lever == "priority" and top.gain_ms == pytest.approx(0.303, abs=1e-6)
    assert "started 0.097 ms after it was ready (cause unknown)" in top.evidence
    assert "where it started at its ready time (ProfilerStep#1)" in top.evidence
    assert v.line.startswith("headroom") and "try priority (up to 0.303 ms)" in v.line


def test_no_lever_where_the_compute_was_as_slow_beside_a_collective_that_started_on_time(tmp_path):
    """The same steps, but the histogram took 600 us in the calm step too: the late start did not slow it, and
    nothing prices priority."""
    kernels = _kernels(calm={0})
    (hist,) = [k for k in kernels[:3] if k.name == "histogram_kernel"]
    hist.dur = 600.0
    d = _diagnose(tmp_path, kernels)
    assert d.compute_slowed and late_start.price(d) is None
    assert all(r.lever != "priority" for r in verdict([d]).recommendations)


def test_no_price_without_a_step_where_the_collective_started_on_time_and_the_verdict_cannot_tell(tmp_path,
                                                                                                  monkeypatch):
    """Every analysed step late: the capture measured no other start, and priority is not named. The histogram ran
    4x alone 3 us after its collective started: a grid released with it (compute_slowed.CO_RELEASED), one hardware
    queue named at the replay with it at its time alone (0.303 ms). Not read so (the reading's threshold raised above
    4x), the smaller CTAs' own price applies. Either way the verdict does not say a scheduling lever can do nothing:
    the histogram ran 450 us a step beyond its 150 us alone beside collectives that waited 97 us to start, and
    whether starting them on time saves it, no step shows; it says so and what to try."""
    d = _diagnose(tmp_path, _kernels(calm=set()))
    assert d.compute_slowed and late_start.price(d) is None
    assert late_start.unmeasured(d) == pytest.approx((97.0, 450.0))
    said = ("compute ran 0.450 ms a step longer than alone beside collectives that started 0.097 ms after they were "
            "ready (cause unknown), and no profiled step ran them at their ready time: what starting them then saves, "
            "this capture cannot tell (try priority")
    v = verdict([d])
    assert all(r.lever != "priority" for r in v.recommendations)
    assert v.line.startswith("headroom 0.303 ms") and said in v.line
    assert "try max-connections (up to 0.303 ms)" in v.line
    monkeypatch.setattr(compute_slowed, "CO_RELEASED_X", 5.0)
    d = _diagnose(tmp_path, _kernels(calm=set()))
    v = verdict([d])  # the smaller CTAs reach 0.036 ms (5.2%): named, and the rest said
    assert all(r.lever not in ("priority", "max-connections") for r in v.recommendations)
    assert v.line.startswith("headroom 0.303 ms") and "try nccl-threads" in v.line and said in v.line
    monkeypatch.setattr(recommend, "NOTHING_TO_GAIN_PCT", 6.0)  # where no lever reaches enough to name
    v = verdict([d])
    assert v.line.startswith("cannot tell whether a scheduling lever helps: headroom 0.303 ms") and said in v.line


def test_a_collective_on_time_beside_slowed_compute_leaves_nothing_unmeasured(tmp_path):
    """With a calm step the late starts are priced (the first test), and nothing is left for the verdict to call
    unmeasured."""
    assert late_start.unmeasured(_diagnose(tmp_path, _kernels(calm={0}))) == (0.0, 0.0)
