"""An ideal scheduler's replay of a dependency graph: the bound on what any lever can give.

Every node starts as early as its release time and its dependencies allow, with
unlimited SMs (no kernel waits for room) and its uncontended duration. The
makespan of that schedule is the step time no scheduling lever can beat.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class Node(NamedTuple):
    release: float  # the earliest start (its launch call's end, or a fixed time)
    duration: float
    deps: tuple[int, ...] = ()  # earlier nodes it starts after the end of
    after: tuple[tuple[int, float], ...] = ()  # (earlier node, lag): it starts at least lag after that one's start


def replay(nodes: Sequence[Node]) -> list[tuple[float, float]]:
    """(start, end) of each node when everything starts as early as possible (nodes may be plain tuples of
    Node's fields).

    Nodes come in a topological order (each dependency has a smaller index), as
    kernels sorted by their measured start are. `after` keeps a measured offset
    between starts where a kernel began before its stream predecessor ended
    (programmatic dependent launch overlaps them).
    """
    starts: list[float] = []
    ends: list[float] = []
    for i, (release, duration, deps, after) in enumerate(nodes):
        start = release
        for d in deps:
            _check(i, d)
            start = max(start, ends[d])
        for d, lag in after:
            _check(i, d)
            start = max(start, starts[d] + lag)
        starts.append(start)
        ends.append(start + duration)
    return list(zip(starts, ends))


def _check(i: int, d: int) -> None:
    if not 0 <= d < i:
        raise ValueError(f"node {i} depends on node {d}: dependencies must come earlier")


def makespan(nodes: Sequence[Node]) -> float:
    """The replayed end of the last node (0 for no nodes)."""
    return max((end for _, end in replay(nodes)), default=0.0)
