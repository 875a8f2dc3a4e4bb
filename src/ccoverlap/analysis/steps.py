"""The typical step: which profiled steps are like the others, and which are not (and why).

A program's first profiled step often is not like the rest (the profiler's start-up stretches it), a step
may be host-bound (the GPU idle between launches), or launch another sequence of kernels (an evaluation, a
checkpoint). A sum or a "first step" inherits such a step; the headline reads the typical steps only.

The rule is generic (nothing fitted to our programs): a step is atypical where its span or its GPU idle time
lies more than MAD_Z robust z-scores from the steps' median (the median absolute deviation scaled to a normal
sigma, Iglewicz and Hoaglin's modified z-score), and more than FLOOR of the median span from it (so steps a
few percent apart are never told apart by a tiny spread); or where its launch sequence (per stream, each
kernel's name and grid in launch order) differs from the one most steps share, where most do. With fewer than
MIN_STEPS steps nothing is left out: a median of two cannot say which one is odd.

Public API: `windows(trace, analysed)` (a trace's analysed kernels by step), `shape` / `shapes(trace)` (each
step's span, idle, signature) and `typical(trace_or_shapes) -> Steps` (`.typical` indices into the steps,
`.left_out` [(index, reason)]), the same for the doctor's verdict and the what-if simulator.
"""
from __future__ import annotations

import hashlib
import statistics
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter, itemgetter

import msgspec

from ccoverlap.analysis.intervals import length, merge
from ccoverlap.analysis.model import KernelEvent, Trace, analysed_indices

_TS, _TS_CORRELATION, _END = attrgetter("ts"), attrgetter("ts", "correlation"), itemgetter(1)
#: Robust z-score beyond which a step's span or idle time is atypical (Iglewicz and Hoaglin's 3.5).
MAD_Z = 3.5
#: ... and only where it is also this far (a share of the median span) from the median: the stated floor.
FLOOR = 0.10
#: Fewer steps than this: none is left out.
MIN_STEPS = 3
#: The MAD of a normal sample is this share of its standard deviation.
_MAD_SIGMA = 0.6745


class Shape(msgspec.Struct, frozen=True, gc=False):
    """One step as the rule sees it (times in us, the trace's clock)."""

    name: str
    start_us: float  # its first kernel's start
    end_us: float  # its last kernel's end
    busy_us: float  # some GPU activity running
    launches: int
    signature: str  # the launch sequence's digest (per stream: name and grid of each kernel, in order)

    @property
    def span_us(self) -> float:
        return self.end_us - self.start_us

    @property
    def idle_us(self) -> float:
        return self.span_us - self.busy_us


@dataclass(frozen=True)
class Steps:
    """The steps of one trace (or one rank's diagnosis): which are typical, which were left out and why."""

    shapes: tuple[Shape, ...]
    typical: tuple[int, ...]  # indices into shapes (and the trace's windows), in order
    left_out: tuple[tuple[int, str], ...]  # (index, reason), in order

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.shapes[i].name for i in self.typical)

    def note(self) -> str | None:
        """One line naming the steps left out, or None."""
        if not self.left_out:
            return None
        return "left out as atypical: " + "; ".join(f"{self.shapes[i].name} ({why})" for i, why in self.left_out)

    def to_dict(self) -> dict:
        return {"typical": list(self.names),
                "left_out": [{"step": self.shapes[i].name, "reason": why} for i, why in self.left_out]}


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
    kernels, calls = trace.kernels, trace.calls
    for i in analysed:  # once per kernel: no call but the lookups
        n = bisect_right(bounds, call.ts if (call := calls[i]) else kernels[i].ts) - 1
        groups[n if n > 0 else 0].append(i)
    return [(order[n][0], groups[n]) for n in sorted(groups)]


def shape(name: str, kernels: Sequence[KernelEvent]) -> Shape:
    """A step's shape from its kernels (any order)."""
    streams: dict[int, list[tuple]] = defaultdict(list)
    ordered = sorted(kernels, key=_TS_CORRELATION)
    for k in ordered:
        streams[k.stream].append((k.name, k.footprint.grid if k.footprint else None))
    spans = [(k.ts, k.ts + k.dur) for k in ordered]  # KernelEvent.end without its call
    return Shape(name, min(map(_TS, kernels), default=0.0), max(map(_END, spans), default=0.0),
                 length(merge(spans)), len(kernels), _signature(tuple(sorted((s, tuple(seq))
                                                                             for s, seq in streams.items()))))


@lru_cache(maxsize=4096)
def _signature(sequence: tuple[tuple[int, tuple], ...]) -> str:
    """The digest of a launch sequence (per stream, by stream: name and grid of each kernel, in order): a trace's
    steps mostly repeat a few, each digested once."""
    return hashlib.blake2b(repr([(s, list(seq)) for s, seq in sequence]).encode(), digest_size=8).hexdigest()


def shapes(trace: Trace, steps: Sequence[tuple[str, list[int]]] | None = None) -> list[Shape]:
    """Each analysed step's shape, in the order of `windows` (`steps`: theirs, where already found)."""
    return [shape(name, [trace.kernels[i] for i in idx])
            for name, idx in (windows(trace, analysed_indices(trace)) if steps is None else steps)]


def typical(of: Trace | Sequence[Shape]) -> Steps:
    """Which steps are typical (see the module's rule); never none: where every step would be left out, all stay."""
    found = tuple(shapes(of) if isinstance(of, Trace) else of)
    n = len(found)
    if n < MIN_STEPS:
        return Steps(found, tuple(range(n)), ())
    spans = [s.span_us for s in found]
    median_span = statistics.median(spans)
    reasons: dict[int, list[str]] = defaultdict(list)
    for what, values in (("span", spans), ("GPU idle", [s.idle_us for s in found])):
        mid = statistics.median(values)
        spread = statistics.median(abs(v - mid) for v in values)
        for i, v in enumerate(values):
            off = abs(v - mid)
            if off > FLOOR * median_span and (spread == 0 or _MAD_SIGMA * off / spread > MAD_Z):
                reasons[i].append(f"{what} {v / 1000:.3f} ms, the median step's {mid / 1000:.3f} ms")
    common, count = Counter(s.signature for s in found).most_common(1)[0]
    if 2 * count > n:
        usual = next(s.launches for s in found if s.signature == common)
        for i, s in enumerate(found):
            if s.signature != common:
                reasons[i].append(f"another launch sequence ({s.launches} launches; {count} of {n} steps share one "
                                  f"of {usual})")
    if len(reasons) == n:
        return Steps(found, tuple(range(n)), ())
    return Steps(found, tuple(i for i in range(n) if i not in reasons),
                 tuple((i, "; ".join(r)) for i, r in sorted(reasons.items())))
