"""The edges inside a CUDA graph replay, from the graph's topology as the doctor's capture read it when the program
captured the graph (doctor/graph_capture.py): a trace holds a replay's kernels on the executor's streams, not what
each waited for, so without this a replay on several streams leaves its kernels' dependencies unknown (deps.py).

A replay is matched to a topology by its activities alone: as many as the graph has kernel, memset and memcpy
nodes, the same launch shapes (blocks in the grid, threads per block; a memory node's is (0, 0)), a C name where a
kernel node has one; within one shape, activities in the order they started take the nodes in topological order.
A match whose activity starts before a predecessor's end is not one (the graph's edge forbids it): the replay
stays unknown rather than guessed."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ccoverlap.analysis.model import KernelClass, KernelEvent
from ccoverlap.util.graph_order import topological

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
    # The order its serial twin ran the nodes in the alone window (positions here; doctor/graph_capture.py), None
    # where it had none: `no_twin` says why, None where the graph is one chain (its replay is serial already).
    serial: tuple[int, ...] | None = None
    no_twin: str | None = None

    @staticmethod
    def from_json(doc: dict) -> Topology:
        """From the capture's line (ValueError where it is malformed): nodes [{name, grid, block}] (a memory node:
        grid and block 0), edges [[a, b]] between them, a before b; "serial", the twin's order of the nodes (each
        after its predecessors), or "no_twin", why none was made."""
        nodes, edges = doc["nodes"], doc["edges"]
        n = len(nodes)
        preds: list[list[int]] = [[] for _ in range(n)]
        for a, b in edges:
            if not (0 <= a < n and 0 <= b < n) or a == b:
                raise ValueError(f"edge {a}->{b} outside {n} nodes")
            preds[b].append(a)
        order = topological(preds)
        where = {node: i for i, node in enumerate(order)}
        serial = doc.get("serial")
        if serial is not None:
            if sorted(serial) != list(range(n)):
                raise ValueError(f"serial order {serial} is not one of the {n} nodes each")
            at = {node: pos for pos, node in enumerate(serial)}
            if any(at[a] > at[b] for a, b in edges):
                raise ValueError("serial order breaks an edge")
            serial = tuple(where[i] for i in serial)
        no_twin = doc.get("no_twin")
        return Topology(tuple(str(nodes[i]["name"]) for i in order),
                        tuple((int(nodes[i]["grid"]), int(nodes[i]["block"])) for i in order),
                        tuple(tuple(sorted(where[p] for p in preds[i])) for i in order), serial,
                        None if no_twin is None else str(no_twin))


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
        if (found := _assign(replay, topo)) is not None:
            return found
    return None


def _fits(k: KernelEvent, topo: Topology, node: int) -> bool:
    """The activity can be the node: the same shape, and the same name where the node's is a C name (the trace's)."""
    name = topo.names[node]
    return _shape(k) == topo.shapes[node] and not (name and not name.startswith("_Z") and name != k.name)


def nodes_of(replay: Sequence[KernelEvent], topo: Topology) -> list[int] | None:
    """Each activity's node in a replay of `topo` (sorted by start; within one shape the earliest takes the first
    node), None where the replay is not one of it (a shape or name that does not fit, an edge broken)."""
    if len(replay) != len(topo.shapes):
        return None
    by_shape: dict = defaultdict(list)
    for node, shape in enumerate(topo.shapes):
        by_shape[shape].append(node)
    free = {shape: iter(nodes) for shape, nodes in by_shape.items()}
    out = []
    for k in replay:
        node = next(free.get(_shape(k), iter(())), None)
        if node is None or not _fits(k, topo, node):
            return None
        out.append(node)
    kernel_of = {node: pos for pos, node in enumerate(out)}
    if any(replay[kernel_of[p]].end > k.ts + PLAUSIBLE_US for k, node in zip(replay, out) for p in topo.preds[node]):
        return None
    return out


def serial_nodes(replay: Sequence[KernelEvent], topo: Topology) -> list[int] | None:
    """Each activity's node in a replay of `topo`'s serial twin (sorted by start: the twin's order), None where the
    replay is not one of it."""
    if topo.serial is None or len(replay) != len(topo.serial):
        return None
    return list(topo.serial) if all(_fits(k, topo, n) for k, n in zip(replay, topo.serial)) else None


def _assign(replay: Sequence[KernelEvent], topo: Topology) -> list[tuple[int, ...]] | None:
    if (nodes := nodes_of(replay, topo)) is None:
        return None
    kernel_of = {node: pos for pos, node in enumerate(nodes)}
    return [tuple(sorted(kernel_of[p] for p in topo.preds[node])) for node in nodes]
