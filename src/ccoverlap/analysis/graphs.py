"""The edges inside a CUDA graph replay, from the graph's topology as the doctor's capture read it when the program
captured the graph (doctor/graph_capture.py): a trace holds a replay's kernels on the executor's streams, not what
each waited for, so without this a replay on several streams leaves its kernels' dependencies unknown (deps.py).

A replay is matched to a topology by its activities alone: as many as the graph has kernel, memset and memcpy
nodes, the same launch shapes (blocks in the grid, threads per block; a memory node's is (0, 0)), a C name where a
kernel node has one; within one shape, activities in the order they started take the nodes in topological order.
A match whose activity starts before a predecessor's end is not one (the graph's edge forbids it): the replay
stays unknown rather than guessed."""
from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ccoverlap.analysis.trace import KernelClass, KernelEvent

#: a predecessor ending this long (us) after its successor started is not the graph's edge (as deps.PLAUSIBLE_US)
PLAUSIBLE_US = 1.0
MEMORY_SHAPE = (0, 0)  # a memset's or memcpy's "shape": they match by kind and order alone


@dataclass(frozen=True)
class Topology:
    """One captured graph's GPU-work nodes (kernels, memsets, memcpys) in topological order and, for each, the
    nodes it waits for (edges through other nodes, event or empty nodes, already followed to the work behind them)."""

    names: tuple[str, ...]  # a kernel's name as the driver has it (mangled for C++, a C name as the trace's); ""
    shapes: tuple[tuple[int, int], ...]  # (blocks in the grid, threads per block); MEMORY_SHAPE for a memory node
    preds: tuple[tuple[int, ...], ...]

    @staticmethod
    def from_json(doc: dict) -> Topology:
        """From the capture's line (ValueError where it is malformed): nodes [{name, grid, block}] (a memory node:
        grid and block 0), edges [[a, b]] between them, a before b."""
        nodes, edges = doc["nodes"], doc["edges"]
        n = len(nodes)
        preds: list[list[int]] = [[] for _ in range(n)]
        for a, b in edges:
            if not (0 <= a < n and 0 <= b < n) or a == b:
                raise ValueError(f"edge {a}->{b} outside {n} nodes")
            preds[b].append(a)
        order = _topological(preds)
        where = {node: i for i, node in enumerate(order)}
        return Topology(tuple(str(nodes[i]["name"]) for i in order),
                        tuple((int(nodes[i]["grid"]), int(nodes[i]["block"])) for i in order),
                        tuple(tuple(sorted(where[p] for p in preds[i])) for i in order))


def _topological(preds: list[list[int]]) -> list[int]:
    """Kahn's order, lowest index first among the ready (the capture's node order); ValueError on a cycle."""
    waiting = [len(set(p)) for p in preds]
    succs: dict[int, set[int]] = defaultdict(set)
    for b, ps in enumerate(preds):
        for a in ps:
            succs[a].add(b)
    ready = [i for i, w in enumerate(waiting) if w == 0]  # ascending: a heap already
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for b in succs[i]:
            waiting[b] -= 1
            if waiting[b] == 0:
                heapq.heappush(ready, b)
    if len(order) != len(preds):
        raise ValueError("the edges make a cycle")
    return order


def parse(docs: Sequence[dict]) -> tuple[tuple[Topology, ...], int]:
    """Every well-formed topology of a record, and how many were not."""
    out, bad = [], 0
    for doc in docs:
        try:
            out.append(Topology.from_json(doc))
        except (KeyError, TypeError, ValueError):
            bad += 1
    return tuple(out), bad


def _shape(k: KernelEvent) -> tuple[int, int] | None:
    if k.kind is KernelClass.MEMORY:
        return MEMORY_SHAPE
    return (k.footprint.grid, k.footprint.threads) if k.footprint else None


def edges(replay: Sequence[KernelEvent], topologies: Sequence[Topology]) -> list[tuple[int, ...]] | None:
    """For each kernel of one replay (sorted by start), the positions in `replay` of the kernels it waited for
    inside the graph; None where no topology matches the replay."""
    for topo in topologies:
        if len(topo.shapes) == len(replay) and (found := _assign(replay, topo)) is not None:
            return found
    return None


def _assign(replay: Sequence[KernelEvent], topo: Topology) -> list[tuple[int, ...]] | None:
    by_shape: dict = defaultdict(list)
    for node, shape in enumerate(topo.shapes):
        by_shape[shape].append(node)
    nodes_of = {shape: iter(nodes) for shape, nodes in by_shape.items()}
    kernel_of = [-1] * len(topo.shapes)
    for pos, k in enumerate(replay):  # by start: the earliest kernel of a shape takes its first node
        node = next(nodes_of.get(_shape(k), iter(())), None)
        if node is None:
            return None
        name = topo.names[node]
        if name and not name.startswith("_Z") and name != k.name:  # a C name is the trace's name
            return None
        kernel_of[node] = pos
    node_of = {pos: node for node, pos in enumerate(kernel_of)}
    out = []
    for pos, k in enumerate(replay):
        preds = tuple(sorted(kernel_of[p] for p in topo.preds[node_of[pos]]))
        if any(replay[p].end > k.ts + PLAUSIBLE_US for p in preds):
            return None
        out.append(preds)
    return out
