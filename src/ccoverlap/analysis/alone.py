"""Each launch's time alone, measured: the doctor's alone window matched to its window, launch by launch.

Right after the window, the doctor's capture records the same number of steps again with every kernel
launch serialized by the launch interposer (each starts on an idle device and ends before the next starts;
doctor/capture.py). Window step i is matched to alone step i (the analysed steps of each, in order), and in a
step each stream's kernels in launch order; a launch is matched where the name and the grid agree. Whatever
does not match is counted, the first example named, and that launch's time alone left unknown: it is never
inferred from other launches of the same kernel (two launches of one shape may do different work).

An alone launch is trusted only if it really ran alone: one that overlapped another alone-window kernel in
time (a CUDA graph's parallel branches, or a launch path the interposer does not see) leaves its match unknown.
A CUDA graph's kernels are matched as any others, by their streams' order in the graph's replay (its node
order: the same graph replayed); where they ran one at a time in the alone window (the launches around the
graph's drain the device, so a single-stream graph's kernels run with nothing beside them) each one's duration
there is its time alone. A graph replayed on several streams ran its branches at once there too, unless the doctor
made it a serial twin (its nodes chained; doctor/graph_capture.py, replayed by the interposer in the alone window
only): a window replay matched to a captured topology (analysis/graphs.py) takes, node by node, the times of the
next alone replay of that topology's twin in the same step (its activities in the twin's order), whatever streams
either ran on. The result is `Trace.alone_us`: window launch key (`key_of`: the correlation; a graph
kernel, which shares its replay's correlation, -1 - (correlation * 2**20 + its place in the replay)) ->
microseconds alone.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter

from ccoverlap.analysis import graphs
from ccoverlap.analysis.steps import windows
from ccoverlap.analysis.model import KernelClass, KernelEvent, Trace, analysed_indices, short_name

#: Two alone-window kernels overlapping by more than this (us) did not run alone.
OVERLAP_US = 1.0
_CORRELATION = attrgetter("correlation")


@dataclass(frozen=True)
class Match:
    """The alone window of one trace, matched: what `Trace.alone_us` holds, and how well it matched."""

    alone_us: dict[int, float]  # window launch's correlation -> its matched alone launch's duration
    launches: int  # kernels of the window's analysed steps (memory copies and sets are not matched)
    unmatched: int  # of them, left unknown
    first: str | None  # the first launch left unknown, and why
    steps: tuple[int, int]  # analysed steps of the window, of the alone window

    @property
    def matched(self) -> int:
        return len(self.alone_us)

    def note(self) -> str | None:
        """One line for the reader where something was left unknown."""
        if not self.unmatched:
            return None
        return (f"alone window: {self.unmatched} of {self.launches} launch(es) not matched, their time alone unknown "
                f"(first: {self.first})")

    def to_dict(self) -> dict:
        return {"launches": self.launches, "matched": self.matched, "unmatched": self.unmatched,
                "first_unmatched": self.first, "steps": list(self.steps)}


def _steps(trace: Trace) -> list[list[KernelEvent]]:
    """The analysed activities of each step, by start."""
    return [[trace.kernels[i] for i in idx] for _, idx in windows(trace, analysed_indices(trace))]


def _by_stream(kernels: list[KernelEvent], claimed: set[int]) -> dict[int, list[KernelEvent]]:
    """The kernels (not memory) not `claimed` (ids), per stream in launch order (a stream runs in issue order)."""
    streams: dict[int, list[KernelEvent]] = defaultdict(list)
    for k in kernels:
        if k.kind is not KernelClass.MEMORY and id(k) not in claimed:
            streams[k.stream].append(k)
    return streams


def _replays(kernels: list[KernelEvent], graph_calls: frozenset[int]) -> list[list[KernelEvent]]:
    """A step's CUDA graph replays, each its activities by start, in the order they began."""
    out: dict[int, list[KernelEvent]] = {}
    for k in kernels:
        if k.correlation in graph_calls:
            out.setdefault(k.correlation, []).append(k)
    return list(out.values())


def _twin_pairs(mine: list[KernelEvent], theirs: list[KernelEvent], trace: Trace,
                alone: Trace) -> list[list[tuple[KernelEvent, KernelEvent]]]:
    """Per window replay matched to a topology with a serial twin, and paired with the next alone replay of that
    twin in the step: its activities each with the alone activity of the same node."""
    topologies = [t for t in trace.graphs if t.serial is not None]
    if not topologies:
        return []
    twins: dict[int, list[list[KernelEvent]]] = defaultdict(list)  # topology -> its twin's alone replays, in order
    for replay in _replays(theirs, alone.graph_calls):
        for t, topo in enumerate(topologies):
            if (nodes := graphs.serial_nodes(replay, topo)) is not None:
                twins[t].append([replay[pos] for pos in sorted(range(len(nodes)), key=nodes.__getitem__)])
                break
    out = []
    for replay in _replays(mine, trace.graph_calls):
        for t, topo in enumerate(topologies):
            if (nodes := graphs.nodes_of(replay, topo)) is not None and twins[t]:
                by_node = twins[t].pop(0)
                out.append([(k, by_node[n]) for k, n in zip(replay, nodes, strict=True)])
                break
    return out


def key_of(trace: Trace) -> Callable[[KernelEvent], int]:
    """Each kernel's key in `Trace.alone_us`: its correlation; a graph replay's kernels share the replay's, so each
    gets -1 - (correlation * 2**20 + its place among them, by start)."""
    if not trace.graph_calls:  # no replay: a pass over every kernel would find none
        return _CORRELATION
    place: dict[int, int] = {}
    seen: dict[int, int] = defaultdict(int)
    for k in trace.kernels:  # sorted by start
        if k.correlation in trace.graph_calls and k.kind is not KernelClass.MEMORY:
            place[id(k)] = -1 - (k.correlation * 2**20 + seen[k.correlation])
            seen[k.correlation] += 1
    return lambda k: place.get(id(k), k.correlation)


def _not_alone(alone: Trace) -> set[int]:
    """Ids of alone-window kernels that did not run alone: they overlapped another kernel."""
    kernels = [k for k in alone.kernels if k.kind is not KernelClass.MEMORY]  # sorted by start
    bad: set[int] = set()
    reach, last = -1.0, None  # the latest end so far and its kernel
    for k in kernels:
        if last is not None and k.ts < reach - OVERLAP_US:
            bad |= {id(k), id(last)}
        if k.end > reach:
            reach, last = k.end, k
    return bad


def _grid(k: KernelEvent) -> int | None:
    return k.footprint.grid if k.footprint else None


def match(trace: Trace, alone: Trace) -> Match:
    """The launches of `trace`'s analysed steps matched to `alone`'s (see the module)."""
    mine, theirs = _steps(trace), _steps(alone)
    suspect = _not_alone(alone)
    key = key_of(trace)
    out: dict[int, float] = {}
    launches = unmatched = 0
    first: str | None = None

    def miss(n: int, why: str) -> None:
        nonlocal unmatched, first
        unmatched += n
        first = first or why

    def pair(k: KernelEvent, a: KernelEvent, where: str) -> None:
        if k.name != a.name or _grid(k) != _grid(a):
            miss(1, f"{where}: {short_name(k.name)} grid {_grid(k)}, alone {short_name(a.name)} grid {_grid(a)}")
        elif id(a) in suspect:
            miss(1, f"{where}: {short_name(k.name)} did not run alone (it overlapped another kernel: a CUDA graph's "
                    "parallel branches, or a launch the interposer does not see)")
        elif k.correlation >= 0:
            out[key(k)] = a.dur
        else:
            miss(1, f"{short_name(k.name)}: no correlation id")

    for step, kernels in enumerate(mine):
        other = theirs[step] if step < len(theirs) else None
        claimed: set[int] = set()
        claimed_alone: set[int] = set()
        for n, pairs in enumerate(_twin_pairs(kernels, other, trace, alone) if other is not None else ()):
            for k, a in pairs:
                claimed.add(id(k))
                claimed_alone.add(id(a))
                if k.kind is not KernelClass.MEMORY:
                    launches += 1
                    pair(k, a, f"step {step + 1}, graph replay {n + 1} (its serial twin alone)")
        streams = _by_stream(other, claimed_alone) if other is not None else {}
        for stream, ks in _by_stream(kernels, claimed).items():
            launches += len(ks)
            if other is None:
                miss(len(ks), f"step {step + 1}: the alone window recorded only {len(theirs)} step(s)")
                continue
            them = streams.get(stream, [])
            if len(them) != len(ks):
                miss(len(ks), f"step {step + 1}, stream {stream}: {len(ks)} launch(es), "
                              f"{len(them)} in the alone window")
                continue
            for n, (k, a) in enumerate(zip(ks, them, strict=True)):
                pair(k, a, f"step {step + 1}, stream {stream}, launch {n + 1}")
    return Match(out, launches, unmatched, first, (len(mine), len(theirs)))


def with_alone(trace: Trace, alone: Trace) -> tuple[Trace, Match]:
    """`trace` with its launches' times alone (Trace.alone_us) from the alone window `alone`."""
    m = match(trace, alone)
    return dataclasses.replace(trace, alone_us=m.alone_us), m
