"""The one way ccoverlap times work: warm-up, repetitions, CUDA events on a GPU, perf_counter on the CPU.

CUDA events time the GPU work a call enqueues, not the host's launch overhead;
on the CPU the work is done when the call returns, so the host clock is the
measure. Samples are milliseconds; `summary` is what every table reports.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def summary(samples: Sequence[float]) -> dict[str, float]:
    """Median, fastest and slowest of the samples."""
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def elapsed_ms(fn: Callable[[], object], cuda: bool = False) -> float:
    """Milliseconds one call of `fn` takes: CUDA events around it on the current stream, or perf_counter."""
    if cuda:
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def timed(fn: Callable[[], object], reps: int, warmup: int = 0, *, cuda: bool = False,
          before: Callable[[], object] | None = None, align: Callable[[], object] | None = None,
          drain: bool = True) -> list[float]:
    """Milliseconds of each of `reps` calls of `fn`, after `warmup` untimed ones.

    `before` runs before every call, warm-up included, outside the timed span
    (e.g. resetting an input); before each timed call the GPU is drained (on
    `cuda`, unless not `drain`: work that runs across calls, such as a collective
    left in flight, must not be finished for free between them) and then `align`
    runs (e.g. a barrier, so ranks start together).
    """
    for _ in range(warmup):
        if before:
            before()
        fn()
    samples = []
    for _ in range(reps):
        if before:
            before()
        if cuda and drain:
            import torch

            torch.cuda.synchronize()
        if align:
            align()
        samples.append(elapsed_ms(fn, cuda))
    return samples
