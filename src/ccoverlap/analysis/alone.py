"""Each launch's time alone, measured: the doctor's alone window matched to its window, launch by launch.

Right after the window, the doctor's capture records the same number of steps again with every kernel
launch serialized by the launch interposer (each starts on an idle device and ends before the next starts;
doctor/capture.py). Window step i is matched to alone step i (the analysed steps of each, in order), and in a
step each stream's kernels in launch order; a launch is matched where the name and the grid agree. Whatever
does not match is counted, the first example named, and that launch's time alone left unknown: it is never
inferred from other launches of the same kernel (two launches of one shape may do different work).

An alone launch is trusted only if it really ran alone: one that overlapped another alone-window kernel in
time (a CUDA graph's kernels, or a launch path the interposer does not see) leaves its match unknown, as does
one launched by a graph replay. The result is `Trace.alone_us`: window correlation -> microseconds alone.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
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


def _not_alone(alone: Trace) -> set[int]:
    """Correlations of alone-window kernels that did not run alone: they overlapped another kernel, or a graph
    replay launched them."""
    kernels = [k for k in alone.kernels if k.kind is not KernelClass.MEMORY]  # sorted by start
    bad = {k.correlation for k in kernels if k.correlation in alone.graph_calls}
    reach, last = -1.0, None  # the latest end so far and its kernel
    for k in kernels:
        if last is not None and k.ts < reach - OVERLAP_US:
            bad |= {k.correlation, last.correlation}
        if k.end > reach:
            reach, last = k.end, k
    return bad


def _grid(k: KernelEvent) -> int | None:
    return k.footprint.grid if k.footprint else None


def match(trace: Trace, alone: Trace) -> Match:
    """The launches of `trace`'s analysed steps matched to `alone`'s (see the module)."""
    mine, theirs = _by_step(trace), _by_step(alone)
    suspect = _not_alone(alone)
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
                miss(len(ks), f"step {step + 1}, stream {stream}: {len(ks)} launch(es), {len(them)} in the alone window")
                continue
            for n, (k, a) in enumerate(zip(ks, them, strict=True)):
                if k.name != a.name or _grid(k) != _grid(a):
                    miss(1, f"step {step + 1}, stream {stream}, launch {n + 1}: {short_name(k.name)} grid {_grid(k)}, "
                            f"alone {short_name(a.name)} grid {_grid(a)}")
                elif a.correlation in suspect:
                    miss(1, f"step {step + 1}, stream {stream}, launch {n + 1}: {short_name(k.name)} did not run alone "
                            "(it overlapped another kernel, or a CUDA graph launched it)")
                elif k.correlation >= 0:
                    out[k.correlation] = a.dur
                else:
                    miss(1, f"{short_name(k.name)}: no correlation id")
    return Match(out, launches, unmatched, first, (len(mine), len(theirs)))


def with_alone(trace: Trace, alone: Trace) -> tuple[Trace, Match]:
    """`trace` with its launches' times alone (Trace.alone_us) from the alone window `alone`."""
    m = match(trace, alone)
    return dataclasses.replace(trace, alone_us=m.alone_us), m
