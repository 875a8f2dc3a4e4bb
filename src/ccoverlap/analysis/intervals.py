"""Interval arithmetic on merged (sorted, disjoint) time intervals: what every time metric is made of."""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from operator import itemgetter, sub

Interval = tuple[float, float]
_START, _END = itemgetter(0), itemgetter(1)


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Union of intervals as sorted disjoint intervals; touching ones join (as HTA's merge)."""
    ordered = sorted(intervals)
    if not ordered:
        return []
    out: list[Interval] = []
    lo, hi = ordered[0]
    for start, end in ordered:
        if start <= hi:
            if end > hi:
                hi = end
        else:
            out.append((lo, hi))
            lo, hi = start, end
    out.append((lo, hi))
    return out


def length(merged: Sequence[Interval]) -> float:
    """The intervals' summed length: each end less its start, added in order (in C)."""
    return sum(map(sub, map(_END, merged), map(_START, merged)))


def intersection(a: Sequence[Interval], b: Sequence[Interval]) -> float:
    """Length of the intersection of two merged (sorted, disjoint) interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def subtract(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """The parts of merged list `a` that merged list `b` does not cover."""
    out: list[Interval] = []
    j = 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k, cursor = j, start
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                out.append((cursor, b[k][0]))
            cursor = max(cursor, b[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def covered(interval: Interval, merged: Sequence[Interval], starts: Sequence[float]) -> float:
    """How much of one interval the merged list covers; `starts` are the merged starts, for bisect."""
    lo, hi = interval
    total = 0.0
    i = max(bisect_right(starts, lo) - 1, 0)
    while i < len(merged) and merged[i][0] < hi:
        total += max(0.0, min(merged[i][1], hi) - max(merged[i][0], lo))
        i += 1
    return total
