"""One way to record the torch.profiler traces `ccoverlap analyze` reads: CPU and CUDA activities,
CUDA sync events on where torch has them (the "Stream Wait Event" records are the dependencies the
analysis resolves), one `ProfilerStep` per step, exported as .json.gz. The bench and the lab record
through `record`, the doctor steps a `Recorder` by hand from inside a program: one set of profiler
arguments, so their traces have the same shape."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def _experimental_config():
    """torch's switch for CUDA sync events (torch >= 2.4), or None where this torch has none."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(enable_cuda_sync_events=True)
    except (ImportError, TypeError):
        return None


class Recorder:
    """torch.profiler stepped by hand: `start()` begins `warmup` steps that are not kept (the profiler's first
    use in a process may miss kernels), each `step()` ends a step, and after `active` recorded steps the trace
    is written to `path`. `stop()` ends it early: recorded steps (the one cut short included) are written, a
    warm-up alone writes nothing. The file appears whole or not at all (written beside it, then renamed)."""

    def __init__(self, path: Path, cuda: bool, warmup: int = 1, active: int = 3):
        from torch.profiler import ProfilerActivity, profile, schedule

        self.path = path
        self.written = False
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        extra = {"experimental_config": config} if cuda and (config := _experimental_config()) is not None else {}
        self._prof = profile(activities=activities, schedule=schedule(wait=0, warmup=warmup, active=active, repeat=1),
                             on_trace_ready=self._export, **extra)

    def _export(self, prof) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp"
                                  + (".gz" if self.path.name.endswith(".gz") else ""))
        try:
            prof.export_chrome_trace(str(tmp))
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)
        self.written = True

    def start(self) -> None:
        self._prof.start()

    def step(self) -> bool:
        """End a step; True once the trace is written (the step after the last recorded one)."""
        self._prof.step()
        return self.written

    def stop(self) -> bool:
        """Stop the profiler; True if a trace was written (now or at the last step)."""
        self._prof.__exit__(None, None, None)
        return self.written


def record(fn: Callable[[], object], path: Path, cuda: bool, warmup: int = 1, active: int = 3) -> Path:
    """Call `fn` warmup + active times under the profiler; the active calls are steps of the trace.

    Record one step more than you want analysed: the analysis stops at the start of the last step,
    which the profiler usually cuts short (docs/analysis.md)."""
    recorder = Recorder(path, cuda, warmup, active)
    recorder.start()
    try:
        for _ in range(warmup + active):
            fn()
            recorder.step()
    finally:
        recorder.stop()
    return path
