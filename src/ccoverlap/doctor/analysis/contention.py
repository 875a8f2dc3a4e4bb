"""Why a collective started late, and what an ideal scheduler would save (the doctor's analysis).

Per communication kernel: when it could have started (`ready_us`, from the
dependency graph of `deps`), how long it then waited for SMs (`sm_wait_us`),
the compute kernels running meanwhile (`blocked_by`) and why it could not start
beside them (`cause`, from the occupancy model applied to their footprints), and
its duration against the same collective uncontended (`slowdown`). Per step:
the exposed communication split into sm_wait, slowdown, dependency and skew,
and the scheduling headroom: measured step time minus the replay of the step's
graph by an ideal scheduler (`replay`). Definitions: docs/analysis.md, "Why a
collective started late".
"""
from __future__ import annotations

import dataclasses
import math
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

from ccoverlap.doctor.analysis.deps import Graph, graph
from ccoverlap.doctor.analysis.intervals import Interval, covered, merge
from ccoverlap.doctor.analysis.replay import makespan
from ccoverlap.doctor.analysis.trace import KernelEvent, KernelClass, Trace, analysed_indices, analysed_kernels, device_limits
from ccoverlap.util.errors import UsageError
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits
from ccoverlap.model.nccl import DEFAULT_CLUSTER
from ccoverlap.model.occupancy import CARVEOUT, Beside, Resource, beside, occupancy


class Cause(str, Enum):
    """Why a ready communication kernel did not start."""

    NONE = "none"  # it did not wait (at most SM_WAIT_TOLERANCE_US: launch latency)
    REGISTERS = "registers"
    THREADS = "threads"
    SHARED_MEMORY = "shared_memory"
    CARVEOUT = "carveout"  # fits by capacity, but the SM's shared-memory configuration does not take it
    BLOCKS = "blocks"
    CLUSTER = "cluster"  # SMs were idle, but not enough of one GPC for its cluster
    DISPATCH_ORDER = "dispatch_order"  # room, but an earlier grid of equal priority was still being dispatched
    UNKNOWN = "unknown"  # none of the above explains it, or a dependency before it is unresolved


#: The occupancy model's blocking resource (`occupancy.Beside.blocking`) as the cause reports name: the one mapping.
RESOURCE_CAUSES: dict[str, Cause] = {
    Resource.REGISTERS.value: Cause.REGISTERS, Resource.WARPS.value: Cause.THREADS,
    Resource.SHARED_MEMORY.value: Cause.SHARED_MEMORY, Resource.BLOCKS.value: Cause.BLOCKS, CARVEOUT: Cause.CARVEOUT,
}
#: A start at most this long (us) after ready is launch latency, not a wait for SMs.
SM_WAIT_TOLERANCE_US = 10.0
#: What exposed communication time is split into (the JSON's order).
PARTS = ("sm_wait", "slowdown", "dependency", "skew")


def collective_key(k: KernelEvent) -> tuple:
    """A collective's identity across launches and ranks: name and size (torch's args), else name and grid."""
    return (k.name, k.collective) if k.collective else (k.name, k.footprint.grid if k.footprint else None)


def _shape(k: KernelEvent) -> tuple:
    """A compute kernel's identity for 'the same kernel': name and launch shape (the grid stands in for the size)."""
    fp = k.footprint
    return (k.name, fp.threads, fp.regs, fp.grid) if fp else (k.name,)


@dataclass(frozen=True)
class CommWait:
    """One communication kernel: when it could have started, how long it waited for SMs, and why."""

    kernel: KernelEvent
    step: str
    ready_us: float  # trace time
    ready_by: str  # what it waited for last: launch (its call), stream (the previous kernel), event, trace (unknown)
    sm_wait_us: float  # start - ready
    blocked_by: tuple[str, ...]  # compute kernels running while it waited, longest overlap first
    cause: Cause
    uncontended_us: float | None  # the same collective's time alone: the baseline's fastest, else this run's
    unresolved: tuple[str, ...]  # event waits before it that could not be resolved
    skew_us: float = 0.0  # how much later the latest peer rank started the same collective
    exposed: dict[str, float] = dataclasses.field(default_factory=dict)  # PARTS -> us of its exposed time

    @property
    def slowdown(self) -> float | None:
        return self.kernel.dur / self.uncontended_us if self.uncontended_us else None

    @property
    def exposed_us(self) -> float:
        return sum(self.exposed.values())

    def to_dict(self) -> dict:
        k = self.kernel
        return {
            "name": k.name, "collective": k.collective[0] if k.collective else None, "step": self.step,
            "stream": k.stream, "start_us": k.ts, "duration_us": k.dur, "ready_us": self.ready_us,
            "ready_by": self.ready_by, "sm_wait_us": self.sm_wait_us, "blocked_by": list(self.blocked_by),
            "cause": self.cause.value, "slowdown": self.slowdown, "uncontended_us": self.uncontended_us,
            "skew_us": self.skew_us, "exposed_us": self.exposed_us, "unresolved": list(self.unresolved),
        }


@dataclass(frozen=True)
class StepDiagnosis:
    """One profiler step of one rank (the whole trace where it has no ProfilerStep annotations)."""

    name: str
    span_us: float  # its kernels' first start to last end
    measured_end: float
    replayed_end: float  # the same graph replayed by an ideal scheduler
    exposed: dict[str, float]  # PARTS -> us

    @property
    def headroom_us(self) -> float:
        """What an ideal scheduler would save (never negative: a replay that ends later counts as none)."""
        return max(0.0, self.measured_end - self.replayed_end)


@dataclass(frozen=True)
class RankDiagnosis:
    rank: int
    comm: tuple[CommWait, ...]
    steps: tuple[StepDiagnosis, ...]
    compute_beside_comm: tuple[float, float, str | None]  # measured us, uncontended us, most slowed kernel
    notes: tuple[str, ...]

    @property
    def headroom_ms(self) -> float:
        return sum(s.headroom_us for s in self.steps) / 1000

    @property
    def step_ms(self) -> float:
        return sum(s.span_us for s in self.steps) / 1000

    @property
    def headroom_pct(self) -> float | None:
        return 100 * self.headroom_ms / self.step_ms if self.step_ms > 0 else None

    @property
    def exposed_ms(self) -> dict[str, float]:
        return {p: sum(s.exposed[p] for s in self.steps) / 1000 for p in PARTS}

    @property
    def compute_slowdown_beside_comm(self) -> float | None:
        measured, alone, _ = self.compute_beside_comm
        return measured / alone if alone > 0 else None


def diagnose(traces: dict[int, Trace], baseline: dict[int, Trace] | None = None,
             comm_cluster: int | None = None) -> dict[int, RankDiagnosis]:
    """Diagnose every rank of one run; skew compares the ranks' starts of the same collective.

    `baseline` (rank -> trace of the same ranks run without overlap) gives the uncontended
    durations; `comm_cluster` the communication kernels' cluster size where known (Kineto does
    not record it: NCCL's default is assumed, and said).
    """
    alone = _fastest([k for t in (baseline or {}).values() for k in analysed_kernels(t)],
                     [k for t in traces.values() for k in analysed_kernels(t) if k.kind is KernelClass.COMMUNICATION])
    passes = {rank: _Rank(t, (baseline or {}).get(rank), alone, comm_cluster) for rank, t in traces.items()}
    skews = _skews({rank: p.comm for rank, p in passes.items()})
    return {rank: p.finish(skews[rank]) for rank, p in passes.items()}


def _skews(ranks: dict[int, list[CommWait]]) -> dict[int, list[float]]:
    """Per rank and communication kernel: the latest start of the same collective on any rank, minus its own.

    The n-th launch of a collective (name and size) in a step is matched across ranks; the ranks'
    clocks are taken to agree (one node, or synchronised clocks).
    """
    def keys(comm: list[CommWait]) -> list[tuple]:
        seen: Counter = Counter()
        out = []
        for c in comm:
            key = (c.step, collective_key(c.kernel))
            out.append((key, seen[key]))
            seen[key] += 1
        return out

    matched = {rank: keys(comm) for rank, comm in ranks.items()}
    latest: dict[tuple, float] = {}
    for rank, comm in ranks.items():
        for key, c in zip(matched[rank], comm, strict=True):
            latest[key] = max(latest.get(key, -math.inf), c.kernel.ts)
    return {rank: [latest[key] - c.kernel.ts for key, c in zip(matched[rank], comm, strict=True)]
            for rank, comm in ranks.items()}


class _Rank:
    """One rank's first pass: graph, windows, uncontended durations and each collective's wait (skew comes later)."""

    def __init__(self, trace: Trace, baseline: Trace | None, comm_alone: dict[tuple, float], comm_cluster: int | None):
        self.trace = trace
        self.graph: Graph = graph(trace)
        kernels = trace.kernels
        self.analysed = analysed_indices(trace)
        self.windows = windows(trace, self.analysed)
        mine = [kernels[i] for i in self.analysed]
        comm = [k for k in mine if k.kind is KernelClass.COMMUNICATION]
        compute = [k for k in mine if k.kind is KernelClass.COMPUTE]
        self.compute_merged = merge((k.ts, k.end) for k in compute)
        self.beside_comm = dict(zip(map(id, compute), overlapping(compute, merge((k.ts, k.end) for k in comm)),
                                    strict=True))
        self.compute_alone = _compute_alone(analysed_kernels(baseline) if baseline else (),
                                            [k for k in compute if not self.beside_comm[id(k)]])
        self.device = device_limits(trace.device)
        running = _Running([k for k in kernels if k.kind is KernelClass.COMPUTE])
        step_of = {i: name for name, idx in self.windows for i in idx if kernels[i].kind is KernelClass.COMMUNICATION}
        self.comm: list[CommWait] = []  # skew and exposed time still to come
        for i in self.analysed:
            k = kernels[i]
            if k.kind is not KernelClass.COMMUNICATION:
                continue
            ready, by = self.graph.ready(i)
            wait = k.ts - ready
            unresolved = self.graph.unresolved.get(i, ())
            blockers = running(ready, k.ts, k.stream) if wait > SM_WAIT_TOLERANCE_US else []
            cause = (Cause.NONE if wait <= SM_WAIT_TOLERANCE_US else Cause.UNKNOWN if unresolved
                     else _cause(k, blockers, ready, self.device, comm_cluster or _nccl_cluster(k, self.device)))
            self.comm.append(CommWait(k, step_of[i], ready, by, wait, tuple(dict.fromkeys(b.name for b in blockers)),
                                      cause, comm_alone.get(collective_key(k)), unresolved))
        self.comm_index = [i for i in self.analysed if kernels[i].kind is KernelClass.COMMUNICATION]
        self.notes = list(self.graph.notes) + _assumptions({c.cause for c in self.comm}, comm_cluster, self.device,
                                                           self.comm)

    def finish(self, skews: list[float]) -> RankDiagnosis:
        """Skew in, then each collective's exposed time split, each step replayed."""
        kernels = self.trace.kernels
        compute, starts = self.compute_merged, [s for s, _ in self.compute_merged]
        comm, frontier = [], -math.inf
        for c, skew in zip(self.comm, skews, strict=True):  # each exposed instant goes to the earliest-started kernel
            lo, hi = max(c.kernel.ts, frontier), c.kernel.end
            frontier = max(frontier, hi)
            exposed = hi - lo - covered((lo, hi), compute, starts) if hi > lo else 0.0
            comm.append(CommWait(c.kernel, c.step, c.ready_us, c.ready_by, c.sm_wait_us, c.blocked_by, c.cause,
                                 c.uncontended_us, c.unresolved, skew, split_exposed(exposed, c, skew)))
        ideal = self._ideal(comm)
        by_step: dict[str, list[CommWait]] = defaultdict(list)
        for c in comm:
            by_step[c.step].append(c)
        steps, later = [], []
        for name, idx in self.windows:
            measured_end = max(kernels[i].end for i in idx)
            replayed_end = makespan(self._nodes(idx, ideal))
            if replayed_end > measured_end + 1e-6:
                later.append(f"{name} by {replayed_end - measured_end:.1f} us")
            exposed = {p: sum(c.exposed[p] for c in by_step[name]) for p in PARTS}
            steps.append(StepDiagnosis(name, measured_end - min(kernels[i].ts for i in idx), measured_end,
                                       replayed_end, exposed))
        notes = self.notes + ([f"the ideal replay ended later than measured ({', '.join(later)}): "
                               "headroom taken as 0 there"] if later else [])
        return RankDiagnosis(self.trace.rank, tuple(comm), tuple(steps), self._compute_beside(), tuple(notes))

    def _ideal(self, comm: list[CommWait]) -> dict[int, float]:
        """Each analysed kernel's duration for an ideal scheduler: collectives uncontended (their wait for a
        late peer kept), compute that ran beside communication unslowed, never longer than measured. Compute
        that ran alone stays as measured: its spread is not the scheduler's to recover (and with no
        communication at all, the headroom is then 0, as it must be)."""
        kernels, alone = self.trace.kernels, self.compute_alone
        out = {}
        for i in self.analysed:
            k = kernels[i]
            slowed = k.kind is KernelClass.COMPUTE and self.beside_comm[id(k)]
            out[i] = min(alone.get(_shape(k), k.dur), k.dur) if slowed else k.dur
        for c, i in zip(comm, self.comm_index, strict=True):
            if c.uncontended_us is not None:
                out[i] = min(c.uncontended_us + c.skew_us, c.kernel.dur)
        return out

    def _nodes(self, idx: list[int], ideal: dict[int, float]) -> list[tuple]:
        """A step's kernels as replay nodes: work outside the step stays where it was measured; a kernel behind an
        unresolved wait is released at its measured start (the bound claims nothing the unknown wait may forbid);
        one that started before its stream predecessor ended keeps its measured lag behind that one's start."""
        kernels, prev, events, unresolved, releases = (self.trace.kernels, self.graph.prev, self.graph.events,
                                                       self.graph.unresolved, self.graph.release)
        pos = dict(zip(idx, range(len(idx))))
        nodes = []
        for n, i in enumerate(idx):
            ts = kernels[i].ts
            release = ts if i in unresolved else releases[i]
            deps, after = [], []
            for j in (prev[i], *events[i]) if i in events else (prev[i],):
                if j < 0:
                    continue
                end = kernels[j].end
                if (at := pos.get(j, n)) >= n:  # outside the step: as measured
                    release = max(release, ts if end > ts else end)
                elif end > ts:  # started before it ended: only a stream predecessor can (deps checks events)
                    after.append((at, ts - kernels[j].ts))
                else:
                    deps.append(at)
            nodes.append((release, ideal[i], tuple(deps), tuple(after)))
        return nodes  # replay takes Node's fields as plain tuples: a NamedTuple per kernel costs ~20% here

    def _compute_beside(self) -> tuple[float, float, str | None]:
        """Compute kernels that ran beside communication, with a known uncontended time: measured and alone (us),
        and the one that lost the most."""
        measured = alone = 0.0
        lost: Counter = Counter()
        for i in self.analysed:
            k = self.trace.kernels[i]
            if self.beside_comm.get(id(k)) and (t := self.compute_alone.get(_shape(k))) is not None:
                measured, alone = measured + k.dur, alone + t
                lost[k.name] += k.dur - t
        return measured, alone, lost.most_common(1)[0][0] if lost else None


def _assumptions(causes: set[Cause], comm_cluster: int | None, device: DeviceLimits | None,
                 comm: list[CommWait]) -> list[str]:
    """What the causes found rest on that the trace does not record."""
    notes = []
    if Cause.CLUSTER in causes and comm_cluster is None:
        notes.append(f"cluster: Kineto does not record cluster sizes; NCCL's default ({DEFAULT_CLUSTER} on sm_90) "
                     "was assumed")
    if Cause.DISPATCH_ORDER in causes:
        notes.append("dispatch_order: Kineto does not record stream priorities; the grids were taken to have "
                     "the communication's priority")
    if device is None and any(c.sm_wait_us > SM_WAIT_TOLERANCE_US for c in comm):
        notes.append("the trace's deviceProperties name no GPU the occupancy model knows: causes are unknown")
    return notes


def overlapping(kernels: Sequence[KernelEvent], merged: Sequence[Interval]) -> list[bool]:
    """For kernels sorted by start: does each overlap (for some time) the merged intervals? One sweep."""
    out, j = [], 0
    for k in kernels:
        while j < len(merged) and merged[j][1] <= k.ts:
            j += 1
        out.append(j < len(merged) and merged[j][0] < k.end and k.dur > 0)
    return out


def split_exposed(exposed: float, c: CommWait, skew_us: float) -> dict[str, float]:
    """A collective's exposed time (us) in PARTS: first its wait for SMs (counted only where compute ran while it
    waited, its dependencies are resolved and the wait is more than launch latency), then its wait for a late
    peer (skew), then its slowdown beyond that; the rest is dependency: it ran with nothing to overlap."""
    left = exposed
    sm = min(left, c.sm_wait_us if c.blocked_by and c.cause is not Cause.NONE and not c.unresolved else 0.0)
    left -= sm
    skew = min(left, skew_us)
    left -= skew
    slow = min(left, max(0.0, c.kernel.dur - c.uncontended_us - skew_us)) if c.uncontended_us else 0.0
    return {"sm_wait": sm, "slowdown": slow, "dependency": left - slow, "skew": skew}


def windows(trace: Trace, analysed: Sequence[int]) -> list[tuple[str, list[int]]]:
    """The analysed kernels (indices into trace.kernels) by profiler step, launched in it; one window without
    two or more steps (named after the one step, or 'trace'). Work launched before the first step joins it."""
    starts: dict[str, float] = {}
    for name, ts in trace.steps:
        starts[name] = min(ts, starts.get(name, ts))
    if len(starts) < 2:
        return [(next(iter(starts), "trace"), list(analysed))] if analysed else []
    order = sorted(starts.items(), key=lambda s: s[1])
    bounds = [ts for _, ts in order]
    groups: dict[int, list[int]] = defaultdict(list)
    kernels, launches = trace.kernels, trace.launches
    for i in analysed:
        call = launches.get(kernels[i].correlation)
        groups[max(bisect_right(bounds, call.ts if call else kernels[i].ts) - 1, 0)].append(i)
    return [(order[n][0], groups[n]) for n in sorted(groups)]


def _fastest(baseline: Sequence[KernelEvent], mine: Sequence[KernelEvent]) -> dict[tuple, float]:
    """Each collective's uncontended time: its fastest launch in the baseline, else in this run (any rank)."""
    out: dict[tuple, float] = {}
    for source in (mine, baseline):  # the baseline's, where it has the collective, win
        found: dict[tuple, float] = {}
        for k in source:
            if k.kind is KernelClass.COMMUNICATION:
                key = collective_key(k)
                found[key] = min(k.dur, found.get(key, math.inf))
        out |= found
    return out


def _compute_alone(baseline: Sequence[KernelEvent], alone: Sequence[KernelEvent]) -> dict[tuple, float]:
    """Each compute kernel's (name and shape) uncontended time: its mean in the baseline, else its mean over
    `alone`, this trace's launches with no communication running."""
    out: dict[tuple, float] = {}
    for source in (alone, baseline):  # the baseline's, where it has the kernel, win
        sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0])
        for k in source:
            if k.kind is KernelClass.COMPUTE:
                entry = sums[_shape(k)]
                entry[0] += k.dur
                entry[1] += 1
        out |= {key: total / n for key, (total, n) in sums.items()}
    return out


class _Running:
    """Compute kernels by start, to find those running in an interval."""

    def __init__(self, compute: list[KernelEvent]):
        self.kernels = compute
        self.starts = [k.ts for k in compute]
        self.longest = max((k.dur for k in compute), default=0.0)

    def __call__(self, lo: float, hi: float, stream: int) -> list[KernelEvent]:
        """Those on other streams than `stream` running at some time in [lo, hi), longest overlap first."""
        out = []
        j = bisect_left(self.starts, hi) - 1
        while j >= 0 and self.starts[j] > lo - self.longest:
            k = self.kernels[j]
            if k.end > lo and k.stream != stream:
                out.append(k)
            j -= 1
        return sorted(out, key=lambda k: (max(k.ts, lo) - min(k.end, hi), k.ts))


def _nccl_cluster(k: KernelEvent, device: DeviceLimits | None) -> int:
    """NCCL's default cluster size for its kernels on sm_90 and newer (Kineto does not record cluster sizes)."""
    sm90 = device is not None and device.vendor == "nvidia" and device.compute_capability >= (9, 0)
    return DEFAULT_CLUSTER if sm90 and k.name.startswith("nccl") else 1


def _cause(comm: KernelEvent, blockers: list[KernelEvent], ready: float, device: DeviceLimits | None, cluster: int) -> Cause:
    """Why `comm`, ready at `ready`, did not start beside `blockers` (the compute kernels running meanwhile).

    The blocker that overlapped the wait longest decides by the occupancy model: a resource that does not
    fit beside it, when no SM was idle; `cluster` when SMs were idle but the communication kernel comes in
    clusters; where it fits, `dispatch_order` when an earlier multi-wave grid was still being dispatched.
    """
    top = blockers[0] if blockers else None
    if device is None or comm.footprint is None or top is None or top.footprint is None:
        return Cause.UNKNOWN
    fit = _beside(device, top.footprint, comm.footprint)
    if fit is None:
        return Cause.UNKNOWN
    if not fit.fits:
        at = max(ready, top.ts)
        busy = sum(min(device.sm_count, b.footprint.grid) for b in blockers if b.footprint and b.ts <= at < b.end)
        if busy >= device.sm_count:
            return RESOURCE_CAUSES[fit.blocking]
        return Cause.CLUSTER if cluster > 1 else Cause.UNKNOWN
    if any(b.footprint and _dispatching(device, b, ready) for b in blockers):
        return Cause.DISPATCH_ORDER
    return Cause.UNKNOWN


def _dispatching(device: DeviceLimits, k: KernelEvent, at: float) -> bool:
    """Was grid `k` still being dispatched at `at`? Its blocks fill more than one wave, and its last wave
    (taken as 1/waves of its time) had not begun."""
    per_sm = _resident(device, k.footprint)
    if not per_sm:
        return False
    waves = math.ceil(k.footprint.grid / (per_sm * device.sm_count))
    return waves > 1 and k.ts <= at < k.ts + k.dur * (waves - 1) / waves


@lru_cache(maxsize=4096)
def _beside(device: DeviceLimits, resident: KernelFootprint, comm: KernelFootprint) -> Beside | None:
    try:
        return beside(device, resident, comm)
    except (UsageError, ValueError):  # a footprint the device cannot run: nothing to say
        return None


@lru_cache(maxsize=4096)
def _resident(device: DeviceLimits, k: KernelFootprint) -> int:
    try:
        return occupancy(device, k).blocks
    except (UsageError, ValueError):
        return 0
