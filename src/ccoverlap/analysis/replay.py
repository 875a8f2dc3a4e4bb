"""A dependency graph replayed: the schedule its kernels get when each starts as soon as its release time, its
dependencies and its own measured start delay allow, with unlimited SMs.

A node's `wait` is its measured start delay beyond what its release and dependencies allowed (a wait for SMs,
a launch gap): replayed with every wait and duration as measured, a step's graph gives the measured schedule
back. Removing a mechanism is replaying with some waits set to 0 or some durations set to their time alone
(contention.py); what that saves is what the mechanism cost.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

_NONE: Mapping[int, float] = MappingProxyType({})


class Node(NamedTuple):
    release: float  # the earliest start (its launch call's end, or a fixed time)
    duration: float
    deps: tuple[int, ...] = ()  # earlier nodes it starts after the end of
    after: tuple[tuple[int, float], ...] = ()  # (earlier node, lag): it starts at least lag after that one's start
    wait: float = 0.0  # held back this much beyond what release and dependencies allow


def replay(nodes: Sequence[Node], durations: Mapping[int, float] = _NONE,
           waits: Mapping[int, float] = _NONE) -> list[tuple[float, float]]:
    """(start, end) of each node (nodes may be plain tuples of Node's fields); `durations` and `waits` (node
    position -> value) replace the nodes' own.

    Nodes come in a topological order (each dependency has a smaller index), as
    kernels sorted by their measured start are. `after` keeps a measured offset
    between starts where a kernel began before its stream predecessor ended
    (programmatic dependent launch overlaps them).
    """
    return list(zip(*_schedule(nodes, durations, waits)))


def makespan(nodes: Sequence[Node], durations: Mapping[int, float] = _NONE,
             waits: Mapping[int, float] = _NONE) -> float:
    """The replayed end of the last node (0 for no nodes)."""
    return max(_schedule(nodes, durations, waits)[1], default=0.0)


def _schedule(nodes: Sequence[Node], durations: Mapping[int, float],
              waits: Mapping[int, float]) -> tuple[list[float], list[float]]:
    """The nodes' starts and ends (see replay): two lists, which makespan reads without pairing them (a rank's
    first pass replays each of its thousands of steps once); a dependency's order checked inline, a call only
    where it is wrong."""
    starts: list[float] = []
    ends: list[float] = []
    for i, node in enumerate(nodes):
        release, duration, deps, after = node[0], node[1], node[2], node[3]
        wait = node[4] if len(node) > 4 else 0.0
        start = release
        for d in deps:
            if not 0 <= d < i:
                _out_of_order(i, d)
            if ends[d] > start:
                start = ends[d]
        for d, lag in after:
            if not 0 <= d < i:
                _out_of_order(i, d)
            start = max(start, starts[d] + lag)
        start += waits.get(i, wait) if waits else wait
        starts.append(start)
        ends.append(start + (durations.get(i, duration) if durations else duration))
    return starts, ends


def _out_of_order(i: int, d: int) -> None:
    raise ValueError(f"node {i} depends on node {d}: dependencies must come earlier")
