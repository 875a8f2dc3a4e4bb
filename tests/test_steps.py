"""The typical step (`ccoverlap.analysis.steps`, issue 27.1): atypical steps named with a reason and left out of
the verdict's headline, which is the median typical step's share."""
from __future__ import annotations

import pytest

import kineto_synth as ks
from ccoverlap.analysis import steps
from ccoverlap.analysis.contention import diagnose
from ccoverlap.analysis.recommend import verdict
from ccoverlap.analysis.reader import read_trace
from test_analysis_doctor import NCCL


def shape(name, span, idle=0.0, signature="a", launches=10):
    return steps.Shape(name, 0.0, span, span - idle, launches, signature)


def test_the_profilers_first_step_is_left_out_with_its_span():
    found = steps.typical([shape("s1", 11_200), shape("s2", 7_250), shape("s3", 7_300), shape("s4", 7_200),
                           shape("s5", 7_280)])
    assert found.typical == (1, 2, 3, 4) and found.names == ("s2", "s3", "s4", "s5")
    ((i, why),) = found.left_out
    assert i == 0 and why.startswith("span 11.200 ms, the median step's 7.280 ms")
    assert "s1 (span 11.200 ms" in found.note()
    assert found.to_dict()["left_out"] == [{"step": "s1", "reason": why}]


def test_steps_a_few_percent_apart_all_stay():
    """Below the floor (10% of the median span) no spread, however small, tells steps apart."""
    found = steps.typical([shape("a", 1000), shape("b", 1000), shape("c", 1000), shape("d", 1080)])
    assert found.left_out == () and found.typical == (0, 1, 2, 3)


def test_a_host_bound_step_is_left_out_by_its_idle_time():
    found = steps.typical([shape("a", 1000, 50), shape("b", 1050, 400), shape("c", 1000, 40), shape("d", 990, 60)])
    ((i, why),) = found.left_out
    assert i == 1 and why.startswith("GPU idle 0.400 ms")


def test_another_launch_sequence_is_left_out_where_most_steps_share_one():
    found = steps.typical([shape("a", 1000), shape("b", 1000, signature="eval", launches=14), shape("c", 1000)])
    assert found.typical == (0, 2) and "another launch sequence (14 launches; 2 of 3 steps share one of 10)" \
        in found.left_out[0][1]
    # no sequence most steps share: the sequence says nothing
    assert steps.typical([shape(n, 1000, signature=n) for n in "abcd"]).left_out == ()


def test_too_few_steps_to_tell_and_never_none_left():
    assert steps.typical([shape("a", 1000), shape("b", 5000)]).typical == (0, 1)
    assert steps.typical([]).typical == ()


def step_kernels(t0, wait):
    """One step from t0: a 1000 us compute grid, a collective whose SM-wait is `wait` us behind it."""
    compute = ks.K("fma_kernel", t0 + 100, 1000, block=128, grid=4 * 132, regs=32, smem=24576, launch_ts=t0 + 90,
                   launch_dur=10)
    comm = ks.K(ks.NCCL, t0 + 160 + wait, 500, launch_ts=t0 + 150, launch_dur=10, **NCCL)
    return [compute, comm]


def test_the_verdict_reads_the_typical_steps_median(tmp_path):
    """Five steps: the first stretched by 3 ms of idle GPU (profiler start-up) and its collective never waited;
    the others each lose 940 us: the headline is the typical step's share, the first named and left out."""
    kernels, marks = [], []
    t = 0.0
    for n in range(6):
        lead = 3000.0 if n == 0 else 0.0
        kernels += step_kernels(t + lead, 0.0 if n == 0 else 940.0)
        marks.append((t, 2000.0 + lead))
        t += 2000.0 + lead
    trace = read_trace(ks.write(tmp_path / "rank0_trace.json", 0, 1, kernels, marks))
    assert [s.name for s in steps.shapes(trace)] == [f"ProfilerStep#{n}" for n in range(1, 6)]
    found = steps.typical(trace)
    assert found.typical == (1, 2, 3, 4) and found.left_out[0][0] == 0
    d = diagnose({0: trace})[0]
    v = verdict([d])
    assert v.typical == ("ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5")
    assert [s for s, _ in v.left_out] == ["ProfilerStep#1"]
    # each typical step: span 1500 us, the replay without the wait ends 500 us sooner (with the compute, at 1100);
    # summed with the first step, the share would have been 2000 / 10500 = 19%
    assert v.headroom_ms == pytest.approx(0.5, abs=0.01) and v.headroom_pct == pytest.approx(33.3, abs=0.1)
    assert v.recommendations[0].gain_ms == pytest.approx(0.5, abs=0.01)
    assert "median of 4 typical step(s)" in v.line and "left out: ProfilerStep#1: span" in v.line
    assert v.to_dict()["left_out_steps"][0]["step"] == "ProfilerStep#1"
