"""One captured step as data: its kernels in launch order, each with what the simulator needs.

A kernel's `alone_us` is the whole launch's time with the GPU to itself (the doctor's alone window, or the
lab's compute-alone and comm-alone runs); its footprint carries grid and cluster. Dependencies are what it
waited for besides its stream's previous kernel (CUDA events), as doctor/analysis/deps.py resolves them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits


@dataclass(frozen=True)
class Kernel:
    """One launch. `sms` confines it to SMs [lo, hi) (an SM partition: green contexts, sm-carveout)."""

    name: str
    footprint: KernelFootprint
    alone_us: float
    stream: int
    comm: bool = False
    deps: tuple[int, ...] = ()  # indices of earlier kernels it waits for through events
    release_us: float = 0.0  # when its launch call ended, from the step's start (it cannot start before)
    hint: int | None = None  # preferred shared-memory carveout, percent (None: not set)
    sms: tuple[int, int] | None = None

    def __post_init__(self):
        if self.alone_us <= 0:
            raise ValueError(f"kernel {self.name!r}: alone time {self.alone_us} us must be > 0")


@dataclass(frozen=True)
class Step:
    """Kernels in launch order; streams' priorities (CUDA's: lower is more urgent; absent: 0); hardware queues
    (CUDA_DEVICE_MAX_CONNECTIONS, CUDA's default 8); `serial`: each kernel waits for the one launched before
    it (the no-overlap baseline)."""

    device: DeviceLimits
    kernels: tuple[Kernel, ...]
    priorities: dict[int, int] = field(default_factory=dict)
    queues: int = 8
    serial: bool = False

    def replace(self, **changes) -> Step:
        return dataclasses.replace(self, **changes)

    def with_kernels(self, fn) -> Step:
        """The step with `fn(kernel)` in place of each kernel."""
        return self.replace(kernels=tuple(fn(k) for k in self.kernels))

    @property
    def comm(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.kernels) if k.comm)


def from_trace(trace, device: DeviceLimits, *, comm_cluster: int = 1) -> tuple[Step, list[str]]:
    """The first analysed step of a doctor trace (with its alone window matched: `Trace.alone_us`) as a Step,
    and what was left out. Launches without a time alone are left out and named: never guessed. Kineto does
    not record the cluster: communication kernels get `comm_cluster` (the caller's knowledge, NCCL's default
    otherwise), compute kernels 1."""
    from ccoverlap.doctor.analysis.contention import windows
    from ccoverlap.doctor.analysis.deps import graph
    from ccoverlap.doctor.analysis.trace import KernelClass, analysed_indices

    g = graph(trace)
    steps = windows(trace, analysed_indices(trace))
    if not steps:
        return Step(device, ()), ["no analysed step in the trace"]
    _, idx = steps[0]
    alone = trace.alone_us or {}
    notes, keep, where = [], [], {}
    for i in idx:
        k = trace.kernels[i]
        if k.kind is KernelClass.MEMORY or k.footprint is None:
            continue
        if k.correlation not in alone:
            notes.append(f"{k.name[:60]}: no time alone (left out)")
            continue
        where[i] = len(keep)
        keep.append(i)
    t0 = min((trace.kernels[i].ts for i in keep), default=0.0)
    kernels = []
    for i in keep:
        k = trace.kernels[i]
        comm = k.kind is KernelClass.COMMUNICATION
        fp = dataclasses.replace(k.footprint, cluster=comm_cluster if comm else 1)
        deps = tuple(where[j] for j in g.events.get(i, ()) if j in where)
        kernels.append(Kernel(k.name, fp, alone[k.correlation], k.stream, comm, deps,
                              max(0.0, min(g.release[i], k.ts) - t0)))
    return Step(device, tuple(kernels)), notes
