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
there is its time alone. The result is `Trace.alone_us`: window launch key (`key_of`: the correlation; a graph
kernel, which shares its replay's correlation, -1 - (correlation * 2**20 + its place in the replay)) ->
microseconds alone.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from ccoverlap.analysis.steps import windows
from ccoverlap.analysis.trace import KernelClass, KernelEvent, Trace, analysed_indices, short_name

#: Two alone-window kernels overlapping by more than this (us) did not run alone.
OVERLAP_US = 1.0


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


def _by_step(trace: Trace) -> list[dict[int, list[KernelEvent]]]:
    """The analysed kernels (not memory) of each step, per stream in launch order (a stream runs in issue order)."""
    out = []
    for _, idx in windows(trace, analysed_indices(trace)):
        streams: dict[int, list[KernelEvent]] = defaultdict(list)
        for i in idx:
            if (k := trace.kernels[i]).kind is not KernelClass.MEMORY:
                streams[k.stream].append(k)
        out.append(streams)
    return out


def key_of(trace: Trace) -> Callable[[KernelEvent], int]:
    """Each kernel's key in `Trace.alone_us`: its correlation; a graph replay's kernels share the replay's, so each
    gets -1 - (correlation * 2**20 + its place among them, by start)."""
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
    mine, theirs = _by_step(trace), _by_step(alone)
    suspect = _not_alone(alone)
    key = key_of(trace)
    out: dict[int, float] = {}
    launches = unmatched = 0
    first: str | None = None

    def miss(n: int, why: str) -> None:
        nonlocal unmatched, first
        unmatched += n
        first = first or why

    for step, streams in enumerate(mine):
        other = theirs[step] if step < len(theirs) else None
        for stream, ks in streams.items():
            launches += len(ks)
            if other is None:
                miss(len(ks), f"step {step + 1}: the alone window recorded only {len(theirs)} step(s)")
                continue
            them = other.get(stream, [])
            if len(them) != len(ks):
                miss(len(ks), f"step {step + 1}, stream {stream}: {len(ks)} launch(es), "
                              f"{len(them)} in the alone window")
                continue
            for n, (k, a) in enumerate(zip(ks, them, strict=True)):
                if k.name != a.name or _grid(k) != _grid(a):
                    miss(1, f"step {step + 1}, stream {stream}, launch {n + 1}: {short_name(k.name)} grid {_grid(k)}, "
                            f"alone {short_name(a.name)} grid {_grid(a)}")
                elif id(a) in suspect:
                    miss(1, f"step {step + 1}, stream {stream}, launch {n + 1}: {short_name(k.name)} did not run alone "
                            "(it overlapped another kernel: a CUDA graph's parallel branches, or a launch the "
                            "interposer does not see)")
                elif k.correlation >= 0:
                    out[key(k)] = a.dur
                else:
                    miss(1, f"{short_name(k.name)}: no correlation id")
    return Match(out, launches, unmatched, first, (len(mine), len(theirs)))


def with_alone(trace: Trace, alone: Trace) -> tuple[Trace, Match]:
    """`trace` with its launches' times alone (Trace.alone_us) from the alone window `alone`."""
    m = match(trace, alone)
    return dataclasses.replace(trace, alone_us=m.alone_us), m
