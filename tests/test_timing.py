"""ccoverlap.util.timing: warm-up, repetitions and what is timed (a fake host clock), and the summary."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from ccoverlap.util import timing


class Clock:
    """A host clock that only moves when the test says so (seconds)."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_summary_is_median_min_max():
    assert timing.summary([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert timing.summary([4.0, 1.0, 3.0, 2.0])["median"] == 2.5


def test_cpu_path_times_only_the_call_after_warm_up(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=clock))
    log: list[str] = []

    def fn():
        log.append("fn")
        clock.now += 0.001 * log.count("fn")  # the n-th call takes n ms

    def before():
        log.append("before")
        clock.now += 7  # outside the timed span

    def align():
        log.append("align")
        clock.now += 11

    samples = timing.timed(fn, reps=3, warmup=2, before=before, align=align)
    assert samples == pytest.approx([3.0, 4.0, 5.0])  # the two warm-up calls are not samples
    assert log == ["before", "fn"] * 2 + ["before", "align", "fn"] * 3  # no barrier in the warm-up


def test_cpu_path_without_hooks(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=clock))
    calls = []

    def fn():
        calls.append(1)
        clock.now += 0.0025

    assert timing.timed(fn, reps=4) == pytest.approx([2.5] * 4) and len(calls) == 4
    assert timing.elapsed_ms(fn) == pytest.approx(2.5)


@pytest.mark.gpu
def test_cuda_path_times_the_gpu_work():
    import torch

    a = torch.randn(2048, 2048, device="cuda")
    samples = timing.timed(lambda: a @ a, reps=5, warmup=2, cuda=True)
    assert len(samples) == 5 and all(s > 0 for s in samples)
