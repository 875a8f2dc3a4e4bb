"""Why a collective started late, and what an ideal scheduler would save (the doctor's analysis).

Per communication kernel: when it could have started (`ready_us`, from the
dependency graph of `deps`), how long it then waited for SMs (`sm_wait_us`),
the compute kernels running meanwhile (`blocked_by`) and why it could not start
beside them (`cause`, from the occupancy model applied to their footprints), and
its duration against its own time alone (`slowdown`), measured in the doctor's
alone window (Trace.alone_us; unknown without one, never inferred from other
launches). Per step: the exposed communication split into sm_wait, slowdown,
dependency and skew; and the step's graph replayed with its measured start
delays (which gives the measured schedule back), so that removing one mechanism
(the SM-wait of one cause, communication slowed beside compute, compute slowed
beside communication) and replaying says what that mechanism cost: the
headroom by mechanism (`Mechanism`, `RankDiagnosis.gain_us`). Definitions:
docs/analysis.md, "Why a collective started late".
"""
from __future__ import annotations

import dataclasses
import marshal
import math
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import compress
from operator import add, attrgetter, itemgetter
from typing import TYPE_CHECKING, Protocol

import msgspec

from ccoverlap.analysis.alone import key_of
from ccoverlap.analysis.deps import Graph, Unresolved, graph
from ccoverlap.analysis.mechanisms import found as mechanisms_found
from ccoverlap.analysis.mechanisms import compute_slowed, late_start, sm_wait
from ccoverlap.analysis.mechanisms.compute_slowed import Slowed
from ccoverlap.analysis.mechanisms.base import SM_WAIT_TOLERANCE_US, Cause, Mechanism
from ccoverlap.analysis.intervals import Interval, covered, merge
from ccoverlap.analysis.replay import makespan
from ccoverlap.analysis.steps import Shape, shape, windows
from ccoverlap.analysis.model import KernelEvent, KernelClass, Trace, analysed_indices, analysed_kernels, device_limits
from ccoverlap.model.limits import DeviceLimits

if TYPE_CHECKING:
    from ccoverlap.control.interposer import LaunchStats
    from ccoverlap.analysis.process import Process


_TS, _DUR, _KIND = attrgetter("ts"), attrgetter("dur"), attrgetter("kind")

#: What exposed communication time is split into (the JSON's order).
PARTS = ("sm_wait", "slowdown", "dependency", "skew")
_PART_GETTERS = tuple((p, itemgetter(p)) for p in PARTS)


def collective_key(k: KernelEvent) -> tuple:
    """A collective's identity across ranks (the n-th of a step with this key is one collective): name and size
    (torch's args), else name and grid."""
    return (k.name, k.collective) if k.collective else (k.name, k.footprint.grid if k.footprint else None)


class CommWait(msgspec.Struct, frozen=True, gc=False):
    """One communication kernel: when it could have started, how long it waited for SMs, and why. A struct, as
    each step's replay and diagnosis and shape are: a rank has thousands, built and pickled in C."""

    kernel: KernelEvent
    step: str
    ready_us: float  # trace time
    ready_by: str  # what it waited for last: launch (its call), stream (the previous kernel), event, trace (unknown)
    sm_wait_us: float  # start - ready
    blocked_by: tuple[str, ...]  # compute kernels running while it waited, longest overlap first
    cause: Cause
    # its time alone, measured (the alone window; the fewest over the ranks); None: unknown
    uncontended_us: float | None
    unresolved: tuple[Unresolved, ...]  # event waits before it that could not be resolved
    skew_us: float = 0.0  # how much later the latest peer rank started the same collective
    exposed: dict[str, float] = msgspec.field(default_factory=dict)  # PARTS -> us of its exposed time
    index: int = -1  # in trace.kernels: its node in the replay
    blocker: KernelEvent | None = None  # the compute kernel that overlapped its wait longest
    blocker_index: int = -1  # the blocker's index in trace.kernels: its node in the replay (-1: none)

    def across_ranks(self, uncontended_us: float | None, skew_us: float, exposed: dict[str, float]) -> CommWait:
        """This wait with what the other ranks tell (the ranks' fewest time alone, skew, its exposed time split):
        one constructor call for each of a rank's thousands."""
        return CommWait(self.kernel, self.step, self.ready_us, self.ready_by, self.sm_wait_us, self.blocked_by,
                        self.cause, uncontended_us, self.unresolved, skew_us, exposed, self.index, self.blocker,
                        self.blocker_index)

    @property
    def waited(self) -> bool:
        """Its start was held back by SMs taken, with a known cause: a wait a replay can remove."""
        return bool(self.blocked_by) and self.cause not in (Cause.NONE, Cause.UNKNOWN) and not self.unresolved

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
            "skew_us": self.skew_us, "exposed_us": self.exposed_us, "unresolved": [str(why) for why in self.unresolved],
        }


class StepReplay(msgspec.Struct, frozen=True, gc=False):
    """A step's dependency graph as replay nodes (replay.Node), with each kernel's measured start delay beyond
    what its release and dependencies allow: replayed as it is, it gives the measured schedule back.

    The nodes are kept packed (marshal: exact floats), unpacked only to replay a change that touches the step:
    a rank's replays were most of what its worker sends back and of what the parent holds per rank (20 of 36 MB
    for 7,356 steps as tuples, measured); the kernel indices too (an array: as a tuple of ints, 3.3 of the 26 MB
    a rank of 150 MB of trace held)."""

    index: array  # the step's kernels (indices into trace.kernels, typecode "l"), in node order
    packed: bytes  # marshal of the nodes: (release, measured duration, deps, after, measured wait) per kernel
    measured_end: float
    replayed_end: float  # replayed with nothing removed
    # node positions in launch order: a kernel's place in a step of the same launch sequence, whatever order they
    # started in (mechanisms/late_start.py); empty where that is node order (most steps: a rank holds thousands)
    launched: array = msgspec.field(default_factory=lambda: array("l"))

    @classmethod
    def of(cls, index: Sequence[int], nodes: tuple[tuple, ...], measured_end: float,
           launched: Sequence[int] = ()) -> StepReplay:
        return cls(array("l", index), marshal.dumps(nodes), measured_end, makespan(nodes), array("l", launched))

    @property
    def order(self) -> Sequence[int]:
        """Node positions in launch order."""
        return self.launched or range(len(self.index))

    @property
    def nodes(self) -> tuple[tuple, ...]:
        return marshal.loads(self.packed)

    def end(self, waits: frozenset[int], durations: Mapping[int, float]) -> float:
        """The replayed end with the kernels in `waits` started as early as allowed and those in `durations`
        given that duration (kernel indices; the rest as measured)."""
        if not waits and not durations:  # as replayed: the dicts below are a pass over the step's kernels
            return self.replayed_end
        w = {n: 0.0 for n, i in enumerate(self.index) if i in waits}
        d = {n: durations[i] for n, i in enumerate(self.index) if i in durations}
        return makespan(self.nodes, d, w) if w or d else self.replayed_end


class StepDiagnosis(msgspec.Struct, frozen=True, gc=False):
    """One profiler step of one rank (the whole trace where it has no ProfilerStep annotations)."""

    name: str
    span_us: float  # its kernels' first start to last end
    measured_end: float
    replayed_end: float  # the same graph replayed with every known mechanism removed
    exposed: dict[str, float]  # PARTS -> us
    shape: Shape | None = None  # its span, idle time and launch sequence (analysis.steps: is it typical?)

    @property
    def headroom_us(self) -> float:
        """What removing every mechanism saves (never negative: a replay that ends later counts as none)."""
        return max(0.0, self.measured_end - self.replayed_end)


@dataclass(frozen=True)
class RankDiagnosis:
    rank: int
    comm: tuple[CommWait, ...]
    steps: tuple[StepDiagnosis, ...]
    compute_beside_comm: tuple[float, float, str | None] | None  # measured us, alone us, most slowed; None: unknown
    notes: tuple[str, ...]
    device: DeviceLimits | None = None
    mechanisms: Mapping[str, Mechanism] = dataclasses.field(default_factory=dict)
    replays: tuple[StepReplay, ...] = dataclasses.field(default=(), repr=False)
    alone_measured: bool = False  # an alone window gave (some of) its launches' times alone
    process: Process | None = None  # what the interposer saw this rank's process launch, its variables
    compute_slowed: tuple[Slowed, ...] = ()  # compute slower beside communication than alone, why

    @property
    def launches(self) -> LaunchStats | None:
        return self.process.launches if self.process else None

    @cached_property
    def started_late(self) -> late_start.Measured | None:
        """Compute slowed beside collectives that started late, as the steps where they did not measured it
        (mechanisms/late_start.py): read once, though the verdict asks for it once per lever and total."""
        return late_start.measured(self)

    def gain_us(self, mechanisms: Iterable[Mechanism]) -> float | None:
        """What removing these mechanisms together saves, summed over the steps (a step whose replay ends later
        counts 0); None where one of them is unknown."""
        steps = self.gain_by_step(mechanisms)
        return None if steps is None else sum(steps)

    def gain_by_step(self, mechanisms: Iterable[Mechanism]) -> list[float] | None:
        """gain_us step by step."""
        mechanisms = list(mechanisms)
        if any(not m.known for m in mechanisms):
            return None
        waits = frozenset().union(*(m.waits for m in mechanisms))
        durations: dict[int, float] = {}
        for m in mechanisms:
            durations |= m.durations
        if not waits and not durations:
            return [0.0] * len(self.replays)
        return [max(0.0, r.measured_end - r.end(waits, durations)) for r in self.replays]

    @property
    def headroom_ms(self) -> float:
        """Every known mechanism removed (an unknown slowdown counts nothing: see `slowdown_known`)."""
        return sum(s.headroom_us for s in self.steps) / 1000

    @property
    def slowdown_known(self) -> bool:
        return all(m.known for m in self.mechanisms.values())

    def mechanism_ms(self) -> dict[str, float | None]:
        """Each mechanism's own gain (ms): the replay with only it removed; None where unknown."""
        return {key: None if (us := self.gain_us([m])) is None else us / 1000 for key, m in self.mechanisms.items()}

    @property
    def step_ms(self) -> float:
        return sum(s.span_us for s in self.steps) / 1000

    @property
    def headroom_pct(self) -> float | None:
        return 100 * self.headroom_ms / self.step_ms if self.step_ms > 0 else None

    @property
    def exposed_ms(self) -> dict[str, float | None]:
        """PARTS -> ms over the steps; slowdown None without an alone window (its time is then in dependency)."""
        return {p: None if p == "slowdown" and not self.alone_measured else sum(s.exposed[p] for s in self.steps) / 1000
                for p in PARTS}

    @property
    def compute_slowdown_beside_comm(self) -> float | None:
        if self.compute_beside_comm is None:
            return None
        measured, alone, _ = self.compute_beside_comm
        return measured / alone if alone > 0 else None


def diagnose(traces: dict[int, Trace], comm_cluster: int | None = None,
             processes: Mapping[int, Process] | None = None) -> dict[int, RankDiagnosis]:
    """Diagnose every rank of one run; skew compares the ranks' starts of the same collective, and a
    collective's time alone is the fewest of its ranks' (each serialized rank of the alone window also waits
    for its peers: the one that started it last waited least).

    `comm_cluster`: the communication kernels' cluster size where the caller knows it; `processes`: rank -> what
    the doctor knows of its process (what the launch interposer saw it launch: clusters, green contexts). Kineto
    records neither: without them NCCL's default cluster is assumed, and said.
    """
    processes = processes or {}
    return across_ranks({rank: first_pass(t, comm_cluster, processes.get(rank)) for rank, t in traces.items()})


Steps = list[tuple[str, list[int]]]  # steps.windows: the analysed kernels (indices) by profiler step


class Ahead(Protocol):
    """What a rank's first pass reads of its trace alone, handed to it (analysis._Ahead: computed in another process
    while this one diagnoses the rank), each asked for when read: the steps (read once the dependency graph is
    made), the steps' shapes (steps.shapes) and the compute beside communication (beside)."""

    @property
    def steps(self) -> Steps: ...

    def shapes(self) -> Sequence[Shape]: ...

    def beside(self) -> tuple[list[Interval], list[int]]: ...


def first_pass(trace: Trace, comm_cluster: int | None = None, process: Process | None = None,
               ahead: Ahead | None = None) -> Pending:
    """What one rank's diagnosis needs from its trace, compact: what the other ranks change comes later."""
    return _Rank(trace, comm_cluster, process, ahead).pending()


def beside(trace: Trace, merged: tuple[list[Interval], list[Interval]] | None = None,
           ) -> tuple[list[Interval], list[int]]:
    """The analysed compute kernels' merged intervals, and those of them (indices) that ran beside communication,
    in trace order: what a rank's first pass reads of its compute. `merged`: the analysed compute and
    communication kernels' merged intervals, where already found (metrics.RankTimes has them)."""
    kernels = trace.kernels
    compute_index = [i for i in analysed_indices(trace) if kernels[i].kind is KernelClass.COMPUTE]
    compute = [kernels[i] for i in compute_index]
    # the kernels' intervals (KernelEvent.end without its call)
    compute_merged, comm_merged = merged or (
        merge([(k.ts, k.ts + k.dur) for k in compute]),
        merge([(k.ts, k.ts + k.dur) for k in analysed_kernels(trace) if k.kind is KernelClass.COMMUNICATION]))
    return compute_merged, list(compress(compute_index, overlapping(compute, comm_merged)))


def across_ranks(pending: Mapping[int, Pending]) -> dict[int, RankDiagnosis]:
    """Every rank's diagnosis from the run's first passes (skew and the fewest time alone across its ranks)."""
    skews, alone = _across_ranks({rank: p.comm for rank, p in pending.items()})
    return {rank: p.finish(skews[rank], alone[rank]) for rank, p in pending.items()}


def _across_ranks(ranks: dict[int, list[CommWait]]) -> tuple[dict[int, list[float]], dict[int, list[float | None]]]:
    """Per rank and communication kernel: the latest start of the same collective on any rank minus its own
    (skew), and the fewest microseconds alone any rank measured for it (None: none did).

    The n-th launch of a collective (name and size) in a step is matched across ranks; the ranks'
    clocks are taken to agree (one node, or synchronised clocks).
    """
    if len(ranks) == 1:  # each collective matched with itself alone: the same figures without the keys (one
        # 157 MB trace: 3 ms instead of 16, measured)
        ((rank, comm),) = ranks.items()
        return ({rank: [max(-math.inf, c.kernel.ts) - c.kernel.ts for c in comm]},
                {rank: [None if c.uncontended_us is None else min(math.inf, c.uncontended_us) for c in comm]})

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
    fewest: dict[tuple, float] = {}
    for rank, comm in ranks.items():
        for key, c in zip(matched[rank], comm, strict=True):
            latest[key] = max(latest.get(key, -math.inf), c.kernel.ts)
            if c.uncontended_us is not None:
                fewest[key] = min(fewest.get(key, math.inf), c.uncontended_us)
    skews = {rank: [latest[key] - c.kernel.ts for key, c in zip(matched[rank], comm, strict=True)]
             for rank, comm in ranks.items()}
    return skews, {rank: [fewest.get(key) for key in matched[rank]] for rank in ranks}


class _Rank:
    """One rank's first pass: graph, windows, times alone and each collective's wait (skew comes later)."""

    def __init__(self, trace: Trace, comm_cluster: int | None, process: Process | None, ahead: Ahead | None = None):
        self.trace = trace
        self.process = process
        self.ahead = ahead
        launches = process.launches if process else None
        self.graph: Graph = graph(trace)
        kernels = trace.kernels
        # each kernel's end (KernelEvent.end), read by every replay; the passes over every kernel here in C
        self.ends = list(map(add, map(_TS, kernels), map(_DUR, kernels)))
        self.analysed = analysed_indices(trace)
        self.windows = ahead.steps if ahead else windows(trace, self.analysed)
        self.alone = trace.alone_us  # launch key (alone.key_of) -> us alone; None: no alone window
        self.alone_key = key_of(trace)
        kinds = list(map(_KIND, kernels))
        is_comm = list(map(KernelClass.COMMUNICATION.__eq__, kinds)).__getitem__  # by kernel index
        comm_index = list(compress(self.analysed, map(is_comm, self.analysed)))
        comm = [kernels[i] for i in comm_index]
        self.device = device_limits(trace.device)
        sm_limits = sm_wait.sm_limits(launches)
        observed = max(launches.comm_clusters) if launches and launches.comm_clusters else None
        self.comm_cluster = comm_cluster or observed  # known, else NCCL's default assumed per kernel
        compute_all = list(compress(range(len(kinds)), map(KernelClass.COMPUTE.__eq__, kinds)))
        running = _Running(list(map(kernels.__getitem__, compute_all)), compute_all)
        self.running_comm = _Running(list(map(kernels.__getitem__, filter(is_comm, range(len(kinds))))))
        step_of = {i: name for name, idx in self.windows for i in filter(is_comm, idx)}
        self.comm: list[CommWait] = []  # skew, the ranks' fewest time alone and exposed time still to come
        for i, k in zip(comm_index, comm):
            ready, by = self.graph.ready(i)
            wait = k.ts - ready
            unresolved = self.graph.unresolved.get(i, ())
            blockers = running(ready, k.ts, k.stream) if wait > SM_WAIT_TOLERANCE_US else []
            cause = (Cause.NONE if wait <= SM_WAIT_TOLERANCE_US else Cause.UNKNOWN if unresolved
                     else sm_wait.cause(k, blockers, ready, self.device,
                                        self.comm_cluster or sm_wait.nccl_cluster(k, self.device), sm_limits))
            self.comm.append(CommWait(k, step_of[i], ready, by, wait, tuple(dict.fromkeys(b.name for b in blockers)),
                                      cause, self._alone(k), unresolved, index=i,
                                      blocker=blockers[0] if blockers else None,
                                      blocker_index=running.index(blockers[0]) if blockers else -1))
        self.notes = list(self.graph.notes) + sm_wait.assumptions({c.cause for c in self.comm},
                                                                  comm_cluster or observed, self.device, self.comm)

    def _alone(self, k: KernelEvent) -> float | None:
        return None if self.alone is None else self.alone.get(self.alone_key(k))

    def pending(self) -> Pending:
        """What finishes the diagnosis once the other ranks are in, without the trace: each collective's exposed
        time before it is split (each exposed instant counted for the earliest-started), the steps' replays
        (the SM-waits a replay removes do not depend on the other ranks), the compute kernels' times alone."""
        kernels, ahead = self.trace.kernels, self.ahead
        held = {c.index for c in self.comm if c.waited}
        replays = tuple(self._replay(idx, held) for _, idx in self.windows)  # first: the ahead's time to compute
        compute, beside_comm = ahead.beside() if ahead else beside(self.trace)
        starts = [s for s, _ in compute]
        exposed, frontier = [], -math.inf
        for c in self.comm:
            lo, hi = max(c.kernel.ts, frontier), c.kernel.end
            frontier = max(frontier, hi)
            exposed.append(hi - lo - covered((lo, hi), compute, starts) if hi > lo else 0.0)
        compute_alone = {i: min(t, kernels[i].dur) for i in beside_comm
                         if (t := self._alone(kernels[i])) is not None and t < kernels[i].dur}
        return Pending(self.trace.rank, tuple(self.comm), tuple(exposed),
                       tuple(ahead.shapes() if ahead else (shape(name, [kernels[i] for i in idx])
                                                           for name, idx in self.windows)),
                       replays, compute_alone,
                       bool(beside_comm), self._compute_beside(beside_comm),
                       compute_slowed.slowed(kernels, beside_comm, self._alone, self.running_comm, self.device),
                       tuple(self.notes), self.device,
                       self.alone is not None, self.process)

    def _replay(self, idx: list[int], held: set[int]) -> StepReplay:
        """A step's kernels as replay nodes: work outside the step stays where it was measured; a kernel behind an
        unresolved wait is released at its measured start (a replay claims nothing the unknown wait may forbid);
        one that started before its stream predecessor ended keeps its measured lag behind that one's start. Each
        node keeps its measured wait beyond its release and dependencies, so the replay gives the measured
        schedule back until a mechanism is removed. A kernel that started more than the tolerance late, just as a
        kernel of another stream ended, is taken to have waited for that one (an event the trace could not tell,
        or SMs it held), unless it is a collective whose wait for SMs (`held`) is a mechanism: a collective made
        earlier then moves it earlier too."""
        kernels, prev, events, unresolved, releases = (self.trace.kernels, self.graph.prev, self.graph.events,
                                                       self.graph.unresolved, self.graph.release)
        end_of = self.ends
        pos = dict(zip(idx, range(len(idx))))
        ends: list[tuple[float, int]] = []  # (end, node) by end: sorted where a kernel first started late
        nodes = []
        for n, i in enumerate(idx):
            k = kernels[i]
            ts = k.ts
            release = ts if i in unresolved else releases[i]
            deps, after = [], []
            base = release
            for j in (prev[i], *events[i]) if i in events else (prev[i],):
                if j < 0:
                    continue
                end = end_of[j]
                # max() written out (the same value, without a call): this runs for every kernel of every step
                if (at := pos.get(j, n)) >= n:  # outside the step: as measured
                    if (measured := ts if end > ts else end) > release:
                        release = measured
                    if release > base:
                        base = release
                elif end > ts:  # started before it ended: only a stream predecessor can (deps checks events)
                    after.append((at, ts - kernels[j].ts))
                    base = ts
                else:
                    deps.append(at)
                    if end > base:
                        base = end
            if ts - base > SM_WAIT_TOLERANCE_US and i not in held:
                if not ends:
                    ends = sorted(zip(map(end_of.__getitem__, idx), range(len(idx))))
                    end_at = [e for e, _ in ends]
                lo, hi = bisect_left(end_at, ts - SM_WAIT_TOLERANCE_US), bisect_right(end_at, ts)
                for end, m in reversed(ends[lo:hi]):
                    if m < n and kernels[idx[m]].stream != k.stream:
                        deps.append(m)
                        base = max(base, end)
                        break
            nodes.append((release, k.dur, tuple(deps), tuple(after), wait if (wait := ts - base) > 0.0 else 0.0))
        corr = [kernels[i].correlation for i in idx]  # launch order, unless it is node order (most steps); sorted
        # stably: a graph's kernels, which share a correlation, in node order
        launched = () if all(a <= b for a, b in zip(corr, corr[1:])) else sorted(range(len(idx)), key=corr.__getitem__)
        return StepReplay.of(idx, tuple(nodes), max(map(end_of.__getitem__, idx)), launched)

    def _compute_beside(self, beside_comm: list[int]) -> tuple[float, float, str | None] | None:
        """Compute kernels that ran beside communication (`beside_comm`), with a measured time alone: measured and
        alone (us), and the one that lost the most; None without an alone window."""
        if self.alone is None:
            return None
        measured = alone = 0.0
        lost: Counter = Counter()
        for i in beside_comm:
            k = self.trace.kernels[i]
            if (t := self._alone(k)) is not None:
                measured, alone = measured + k.dur, alone + t
                lost[k.name] += k.dur - t
        return measured, alone, lost.most_common(1)[0][0] if lost else None


@dataclass(frozen=True)
class Pending:
    """One rank's first pass, compact (no trace): what `finish` needs once the other ranks' collectives are in.
    Worker processes return it (analysis.parallel)."""

    rank: int
    comm: tuple[CommWait, ...]  # skew and the ranks' fewest time alone still to come
    exposed: tuple[float, ...]  # per collective: its exposed time, not yet split into PARTS
    windows: tuple[Shape, ...]  # per step: its name, first kernel's start, idle time and launch sequence
    replays: tuple[StepReplay, ...]
    compute_alone: Mapping[int, float]  # compute kernel index -> its time alone, where it ran longer beside comm
    compute_beside_any: bool  # some compute ran beside communication
    compute_beside: tuple[float, float, str | None] | None
    compute_slowed: tuple[Slowed, ...]
    notes: tuple[str, ...]
    device: DeviceLimits | None
    alone_measured: bool
    process: Process | None

    def finish(self, skews: list[float], alone: list[float | None]) -> RankDiagnosis:
        """Skew and the ranks' fewest time alone in, then each collective's exposed time split, the mechanisms
        found and every known one removed in the steps' replays."""
        comm = []
        for c, exposed, skew, fewest in zip(self.comm, self.exposed, skews, alone, strict=True):
            comm.append(c.across_ranks(fewest, skew, split_exposed(exposed, c, skew, fewest)))
        mechanisms = mechanisms_found(self, comm)
        everything = [m for m in mechanisms.values() if m.known]
        waits = frozenset().union(*(m.waits for m in everything))
        durations = {i: t for m in everything for i, t in m.durations.items()}
        by_step: dict[str, list[CommWait]] = defaultdict(list)
        for c in comm:
            by_step[c.step].append(c)
        steps, later = [], []
        for window, replay in zip(self.windows, self.replays, strict=True):
            name, first = window.name, window.start_us
            replayed_end = replay.end(waits, durations)
            if replayed_end > replay.measured_end + 1e-6:
                later.append(f"{name} by {replayed_end - replay.measured_end:.1f} us")
            parts = [c.exposed for c in by_step[name]]  # each part summed in C, in the collectives' order
            exposed = {p: sum(map(get, parts)) for p, get in _PART_GETTERS}
            steps.append(StepDiagnosis(name, replay.measured_end - first, replay.measured_end, replayed_end, exposed,
                                       window))
        notes = self.notes + (("the replay without the mechanisms found ended later than measured "
                               f"({', '.join(later)}): "
                               "headroom taken as 0 there",) if later else ())
        return RankDiagnosis(self.rank, tuple(comm), tuple(steps), self.compute_beside, notes, self.device, mechanisms,
                             self.replays, self.alone_measured, self.process, self.compute_slowed)

    def provisional(self) -> RankDiagnosis:
        """The diagnosis as far as this rank alone tells: its collectives' waits and causes (what the rules read),
        no steps."""
        return RankDiagnosis(self.rank, self.comm, (), self.compute_beside, self.notes, self.device,
                             alone_measured=self.alone_measured, process=self.process,
                             compute_slowed=self.compute_slowed)

def overlapping(kernels: Sequence[KernelEvent], merged: Sequence[Interval]) -> list[bool]:
    """For kernels sorted by start: does each overlap (for some time) the merged intervals? One sweep."""
    out, j = [], 0
    for k in kernels:
        while j < len(merged) and merged[j][1] <= k.ts:
            j += 1
        out.append(j < len(merged) and merged[j][0] < k.end and k.dur > 0)
    return out


def split_exposed(exposed: float, c: CommWait, skew_us: float, uncontended_us: float | None) -> dict[str, float]:
    """A collective's exposed time (us) in PARTS: first its wait for SMs (counted only where compute ran while it
    waited, its dependencies are resolved and the wait is more than launch latency), then its wait for a late
    peer (skew), then its slowdown beyond its time alone (the ranks' fewest); the rest is dependency: it ran
    with nothing to overlap."""
    left = exposed
    sm = min(left, c.sm_wait_us if c.blocked_by and c.cause is not Cause.NONE and not c.unresolved else 0.0)
    left -= sm
    skew = min(left, skew_us)
    left -= skew
    slow = min(left, max(0.0, c.kernel.dur - uncontended_us - skew_us)) if uncontended_us else 0.0
    return {"sm_wait": sm, "slowdown": slow, "dependency": left - slow, "skew": skew}


class _Running:
    """Kernels (compute, or communication) by start, to find those running in an interval."""

    def __init__(self, kernels: list[KernelEvent], indices: list[int] | None = None):
        self.kernels = kernels
        self.indices = indices  # each kernel's index in trace.kernels, where the caller needs them back
        self.starts = list(map(_TS, kernels))
        self.longest = max(map(_DUR, kernels), default=0.0)

    def index(self, k: KernelEvent) -> int:
        """`k`'s index in trace.kernels (it is one of these kernels; `indices` given)."""
        j = bisect_left(self.starts, k.ts)
        while self.kernels[j] is not k:
            j += 1
        return self.indices[j]

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


