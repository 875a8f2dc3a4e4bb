"""One way to record the torch.profiler traces `ccoverlap analyze` reads: CPU and CUDA activities,
CUDA sync events on where torch has them (the "Stream Wait Event" records are the dependencies the
analysis resolves), one `ProfilerStep` per call, exported as .json.gz. The bench, the lab and the
doctor record through it, so their traces have the same shape."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def _experimental_config():
    """torch's switch for CUDA sync events (torch >= 2.4), or None where this torch has none."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(enable_cuda_sync_events=True)
    except (ImportError, TypeError):
        return None


def record(fn: Callable[[], object], path: Path, cuda: bool, warmup: int = 1, active: int = 3) -> Path:
    """Call `fn` warmup + active times under the profiler; the active calls are steps of the trace.

    Record one step more than you want analysed: the analysis stops at the start of the last step,
    which the profiler usually cuts short (docs/analysis.md)."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = {"experimental_config": config} if cuda and (config := _experimental_config()) is not None else {}
    with profile(activities=activities, schedule=schedule(wait=0, warmup=warmup, active=active),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path)), **extra) as prof:
        for _ in range(warmup + active):
            fn()
            prof.step()
    return path
