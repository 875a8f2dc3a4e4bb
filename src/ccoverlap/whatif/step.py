"""One captured step as data: its kernels in launch order, each with what the simulator needs.

A kernel's `alone_us` is the whole launch's time with the GPU to itself (the doctor's alone window, or the
lab's compute-alone and comm-alone runs); its footprint carries grid and cluster. Dependencies are what it
waited for besides its stream's previous kernel (CUDA events), as analysis/deps.py resolves them. A step read
from a trace also carries what was measured (its span, each launch's start), which the simulated default must
reproduce before a lever is predicted (`anchor`).
"""
from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits
from ccoverlap.analysis import KernelClass, analysed_indices, graph, intervals, windows
from ccoverlap.analysis.alone import key_of
from ccoverlap.analysis.deps import GRAPH_EDGES_UNKNOWN
from ccoverlap.analysis.steps import typical
from ccoverlap.whatif.duration import allowance, observed_memory_share


@dataclass(frozen=True)
class Kernel:
    """One launch. `sms` confines it to SMs [lo, hi) (an SM partition: green contexts, sm-carveout). A memory copy
    or set (`footprint` None) takes a copy engine, no SM: it lasts its time alone once its stream reaches it."""

    name: str
    footprint: KernelFootprint | None
    alone_us: float
    stream: int
    comm: bool = False
    deps: tuple[int, ...] = ()  # indices of earlier kernels it waits for through events
    release_us: float = 0.0  # when its launch call ended, from the step's start (it cannot start before)
    hint: int | None = None  # preferred shared-memory carveout, percent (None: not set)
    sms: tuple[int, int] | None = None
    basis: KernelFootprint | None = None  # the footprint `alone_us` was measured with, no hint (None: `footprint`)
    measured_start_us: float | None = None  # its start in the capture, from the step's start (None: not captured)
    measured_end_us: float | None = None  # its end in the capture, from the step's start (None: not captured)
    memory_bound: float | None = None  # the most memory share its capture allows (duration.observed_memory_share)
    held: float | None = None  # the slowest pace its capture allows, where the simulated default slowed it more
    # (anchor.hold); None: the calibrated pace
    protocol: str | None = None  # how NCCL_NTHREADS acts on it, where its source says (None: its threads say)
    launch_us: float | None = None  # when its launch call ended, from the step's start, before it where the host
    # ran ahead (None: no launch call in the capture, or a CUDA graph's replay: the interposer saw it at capture)

    @property
    def measured(self) -> tuple[KernelFootprint | None, int | None]:
        """(footprint, hint) under which `alone_us` was measured."""
        return (self.footprint, self.hint) if self.basis is None else (self.basis, None)

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
    name: str = ""  # the profiler step it was read from
    measured_us: float | None = None  # the captured step's span (analysis/steps.py; None: not captured)
    idle_us: float | None = None  # the GPU's idle time within that span (None: not captured)
    hidden: str | None = None  # why what a kernel of the step waited for is not in the trace (a CUDA graph's edges)
    unknown_us: float = 0.0  # measured time of the launches left out for want of a time alone
    unknown: tuple[str, ...] = ()  # their names, in the trace's order
    comm_before_us: float | None = None  # the latest end of a collective started before the step (None: none)

    def replace(self, **changes) -> Step:
        return dataclasses.replace(self, **changes)

    def with_kernels(self, fn) -> Step:
        """The step with `fn(kernel)` in place of each kernel."""
        return self.replace(kernels=tuple(fn(k) for k in self.kernels))

    @property
    def comm(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.kernels) if k.comm)

    def launched_in_flight(self) -> frozenset[int]:
        """The launches made while a collective was in flight, as the capture timed them: the interposer's gate
        (csrc/interposer.c, "communication in flight") pads only compute launched while a collective launched
        before it, this step's or the previous step's, has not ended. A launch whose time the capture does not
        give (`launch_us` None) counts as one: its gate is not known, and padding it is what shaping would do."""
        out, ended = set(), self.comm_before_us
        for i, k in enumerate(self.kernels):  # in launch order
            if k.launch_us is None or (ended is not None and ended > k.launch_us):
                out.add(i)
            if k.comm:
                ends = k.measured_end_us if k.measured_end_us is not None else float("inf")
                ended = ends if ended is None else max(ended, ends)
        return frozenset(out)


def from_trace(trace, device: DeviceLimits, *, comm_cluster: int = 1, alone: dict[int, float] | None = None,
               streams: set[int] | None = None, step: int = 0) -> tuple[Step, list[str]]:
    """Analysed step number `step` of a trace (`windows`' order) as a Step, and what was left out. Times alone
    are `alone` (correlation -> us; default: the doctor's alone window matched, `Trace.alone_us`); kernels
    without one are left out and named: never guessed. A copy or memset without one (the alone window runs
    kernels only) is kept at its measured time: it takes no SM in the simulation, and left out, the launches
    behind it on its stream would start that much early. `streams`: only these streams' kernels (None: all).
    Kineto does not record the cluster: communication kernels get `comm_cluster` (the caller's knowledge),
    compute kernels 1."""
    steps = windows(trace, analysed_indices(trace))
    if not steps:
        return Step(device, ()), ["no analysed step in the trace"]
    name, idx = steps[step]
    g = graph(trace)
    # the doctor's alone window is keyed as alone.key_of keys it (a CUDA graph replay's kernels apart); `alone`
    # given is by correlation
    key = key_of(trace) if alone is None else (lambda k: k.correlation)
    alone = (trace.alone_us or {}) if alone is None else alone
    keep, unknown, measured = [], [], {}
    idx = [i for i in idx if streams is None or trace.kernels[i].stream in streams]
    for i in idx:
        k = trace.kernels[i]
        if key(k) not in alone and k.kind is KernelClass.MEMORY and k.dur > 0:
            measured[i] = k.dur
        (keep if key(k) in alone or i in measured else unknown).append(i)

    def counted(which, what: str) -> list[str]:  # one line per name: a DDP step holds hundreds of memsets and copies
        return [f"{name}: no time alone{what.format('es' if n > 1 else '', n=n)}"
                for name, n in Counter(trace.kernels[i].name[:60] for i in which).items()]

    notes = (counted(unknown, ", {n} launch{} left out of the step")
             + counted(measured, " (the alone window runs kernels only), {n} launch{} kept at its time in the step"))
    # in launch order (the launch calls' ends; a kernel without one, at its start): the hardware queues take
    # kernels as they are launched, and a collective that started after the kernel launched behind it (it waited
    # for an event) is still ahead of it in a queue the two streams share
    keep.sort(key=lambda i: (g.release[i], trace.kernels[i].ts))
    where = {i: n for n, i in enumerate(keep)}
    t0 = min((trace.kernels[i].ts for i in keep), default=0.0)
    crowded = together([(trace.kernels[i].ts, trace.kernels[i].end) for i in keep
                        if trace.kernels[i].kind is not KernelClass.MEMORY and trace.kernels[i].footprint])
    kernels = []
    for i in keep:
        k = trace.kernels[i]
        comm = k.kind is KernelClass.COMMUNICATION
        fp = None if k.kind is KernelClass.MEMORY or k.footprint is None else dataclasses.replace(
            k.footprint, cluster=comm_cluster if comm else 1)
        deps = tuple(where[j] for j in waits_through(i, g.events, g.prev, where.keys(), set(idx)))
        beside = intervals.intersection([(k.ts, k.end)], crowded[max(bisect_left(crowded, (k.ts,)) - 1, 0):])
        alone_us = measured[i] if i in measured else alone[key(k)]
        kernels.append(Kernel(k.name, fp, alone_us, k.stream, comm, deps,
                              max(0.0, min(g.release[i], k.ts) - t0), measured_start_us=k.ts - t0,
                              measured_end_us=k.end - t0,
                              memory_bound=observed_memory_share(alone_us, k.dur, beside) if fp else None,
                              launch_us=g.release[i] - t0 if g.launched[i] and k.correlation not in
                              trace.graph_calls else None))
    # what the capture shows of a kernel's memory share beside others holds for its launches that show none (beside
    # nothing, or too briefly to tell) and did not slow, the same code: the largest bound its launches of that name show
    shown: dict[str, float] = {}
    for k in kernels:
        if k.memory_bound is not None:
            shown[k.name] = max(shown.get(k.name, 0.0), k.memory_bound)
    kernels = [dataclasses.replace(k, memory_bound=shown[k.name])
               if k.name in shown and k.footprint and k.measured_end_us - k.measured_start_us <= k.alone_us
               + allowance(k.alone_us) else k for k in kernels]
    hidden = next((text for i in idx for why in g.unresolved.get(i, ()) if GRAPH_EDGES_UNKNOWN in (text := str(why))),
                  None)
    before = [k.end - t0 for k in trace.kernels if k.kind is KernelClass.COMMUNICATION and k.ts < t0]
    return Step(device, tuple(kernels), name=name, hidden=hidden,
                unknown_us=sum(trace.kernels[i].dur for i in unknown),
                unknown=tuple(trace.kernels[i].name for i in unknown),
                comm_before_us=max(before, default=None)), notes


def together(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The times when two or more of `spans` ran at once, sorted and disjoint: where a kernel ran beside another
    (one sweep, not a union of the others per kernel: a step holds thousands of launches)."""
    edges = sorted([(lo, 1) for lo, _ in spans] + [(hi, -1) for _, hi in spans])  # at one time, ends first
    out: list[tuple[float, float]] = []
    running, since = 0, 0.0
    for t, step in edges:
        running += step
        if step > 0 and running == 2:
            since = t
        elif step < 0 and running == 1 and t > since:
            out.append((since, t))
    return out


def waits_through(i: int, events: Mapping[int, tuple[int, ...]], prev: Sequence[int], kept: Collection[int],
                  step: Collection[int]) -> list[int]:
    """The kept launches of the step that launch `i` waits for through CUDA events, in order, with a left-out
    launch (no time alone: a kernel the alone window could not run alone; once a memset, now kept) seen through:
    what it waited for (its stream's previous launch, its events; past an event, its stream's previous launch
    too), so a wait a left-out launch carried still binds the launches after it. Without it, the kernel behind a
    left-out launch that waited for a collective would start beside the collective (measured, it waits)."""
    out: dict[int, None] = {}
    seen: set[int] = set()

    def through(j: int, event: bool) -> None:
        if j < 0 or j not in step or j in seen:
            return
        seen.add(j)
        if j in kept:
            if event:
                out[j] = None
            return
        through(prev[j], event)
        for e in events.get(j, ()):
            through(e, True)

    through(prev[i], False)
    for j in events.get(i, ()):
        through(j, True)
    return list(out)


def typical_steps(trace, device: DeviceLimits, *, comm_cluster: int = 1) -> tuple[list[Step], list[str]]:
    """Every typical step of a trace (analysis/steps.py `typical`: the profiler's disturbed first step, a
    host-bound or other step left out, and said so) as Steps, and what was left out (notes said once)."""
    chosen = typical(trace)
    steps, notes = [], {}
    for n in chosen.typical:
        s, left = from_trace(trace, device, comm_cluster=comm_cluster, step=n)
        steps.append(s.replace(measured_us=chosen.shapes[n].span_us, idle_us=chosen.shapes[n].idle_us))
        for x in left:  # the first step's line for each name: the typical steps share one launch sequence
            notes.setdefault(x.split(": no time alone")[0], x)
    return steps, ([note] if (note := chosen.note()) else []) + list(notes.values())
