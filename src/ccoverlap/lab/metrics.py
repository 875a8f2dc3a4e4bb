"""Turn timing samples into the lab's numbers: medians, reduction vs sequential, overlap efficiency."""
from __future__ import annotations

from ccoverlap.util.timing import summary


def reduction(t_seq: float, t: float) -> float:
    """Share of the sequential time saved (positive is faster)."""
    return (t_seq - t) / t_seq


def efficiency(t_seq: float, t: float, t_ideal: float) -> float | None:
    """E = (T_seq - T) / (T_seq - T_ideal): 1 is perfect overlap, 0 no gain, < 0 worse than sequential."""
    gap = t_seq - t_ideal
    return (t_seq - t) / gap if gap > 0 else None


def case_rows(case: dict, measured: dict[str, dict]) -> list[dict]:
    """Rows for one (compute, comm) case: one per strategy and order, metrics against the case's baselines.

    `measured[key]` holds 'samples' (lists of total_ms, comm_done_ms, compute_ms) or a 'status'.
    `case` holds compute_alone_ms, comm_alone_ms and the sequential median.
    """
    t_seq = case["sequential_ms"]
    t_ideal = max(case["compute_alone_ms"], case["comm_alone_ms"])
    rows = []
    for (strategy, order), m in measured.items():
        row = {"compute": case["compute"], "comm": case["comm"], "strategy": strategy, "order": order, **m["info"]}
        if "samples" not in m:
            rows.append(row | {"status": m["status"]})
            continue
        s = m["samples"]
        total, comm_done, compute = summary(s["total_ms"]), summary(s["comm_done_ms"]), summary(s["compute_ms"])
        rows.append(row | {
            "status": "ok",
            "total_ms": total["median"],
            "total_ms_min": total["min"],
            "total_ms_max": total["max"],
            "comm_done_ms": comm_done["median"],
            "comm_done_ms_min": comm_done["min"],
            "comm_done_ms_max": comm_done["max"],
            "compute_ms": compute["median"],
            "compute_slowdown": compute["median"] / case["compute_alone_ms"] if compute["median"] else None,
            "comm_slowdown": comm_done["median"] / case["comm_alone_ms"] if comm_done["median"] else None,
            "reduction_vs_sequential": reduction(t_seq, total["median"]),
            "efficiency": efficiency(t_seq, total["median"], t_ideal),
            "samples": s,
        })
    return rows
