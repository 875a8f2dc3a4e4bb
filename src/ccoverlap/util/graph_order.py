"""One topological order of a DAG, the same wherever it is taken: the doctor chains a CUDA graph's serial twin in
it (doctor/graph_capture.py) and the analysis orders a captured graph's work nodes by it (analysis/graphs.py)."""
from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence


def topological(preds: Sequence[Sequence[int]]) -> list[int]:
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
