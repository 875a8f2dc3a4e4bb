"""Lab pictures: strategy bars per case and block-residency timelines. Agg only; never shows windows."""
from __future__ import annotations

from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bars(rows: list[dict], path: Path, order: str = "with") -> Path:
    """Total time per strategy (median, min-max whiskers) with comm completion marked, one panel per case."""
    plt = _pyplot()
    cases = sorted({(r["compute"], r["comm"]) for r in rows})
    fig, axes = plt.subplots(len(cases), 1, figsize=(10, 2.6 * len(cases)), squeeze=False)
    for ax, (compute, comm) in zip(axes[:, 0], cases):
        mine = [r for r in rows if (r["compute"], r["comm"]) == (compute, comm) and r["status"] == "ok"
                and r["order"] in (order, "with")]
        mine = [r for r in mine if r["strategy"] == "sequential" or r["order"] == order]
        names = [r["strategy"] for r in mine]
        totals = [r["total_ms"] for r in mine]
        err = [[t - r["total_ms_min"] for t, r in zip(totals, mine)], [r["total_ms_max"] - t for t, r in zip(totals, mine)]]
        ax.barh(names, totals, xerr=err, color="#4c72b0", label="total (median, min-max)")
        ax.scatter([r["comm_done_ms"] for r in mine], names, color="#c44e52", zorder=3, label="comm done")
        if mine:
            ideal = max(mine[0]["compute_alone_ms"], mine[0]["comm_alone_ms"])
            ax.axvline(ideal, color="green", ls="--", lw=1, label="ideal")
            ax.axvline(mine[0]["sequential_ms"], color="gray", ls=":", lw=1, label="sequential")
        ax.set_title(f"{compute} + {comm} proxy (order: comm {order} compute)", fontsize=10)
        ax.set_xlabel("ms")
        ax.invert_yaxis()
    axes[0, 0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def timeline(timelines: dict, case: tuple[str, str], strategies: list[str], path: Path, order: str = "with") -> Path:
    """Which SM ran which block when: compute blocks grey, comm CTAs red, one panel per strategy."""
    plt = _pyplot()
    from matplotlib.collections import LineCollection

    keys = [k for k in ((case[0], case[1], s, order if s != "sequential" else "with") for s in strategies) if k in timelines]
    fig, axes = plt.subplots(len(keys), 1, figsize=(10, 2.2 * len(keys)), squeeze=False, sharex=True)
    for ax, key in zip(axes[:, 0], keys):
        t = timelines[key]
        ax.add_collection(LineCollection([[(s, sm), (e, sm)] for s, e, sm in t["compute"]], colors="#999999", lw=0.6))
        ax.add_collection(LineCollection([[(s, sm), (e, sm)] for s, e, sm in t["comm"]], colors="#c44e52", lw=2.5))
        ax.autoscale()
        ax.set_ylabel("SM")
        ax.set_title(f"{key[2]}: comm CTAs (red) among compute blocks (grey)", fontsize=9)
    axes[-1, 0].set_xlabel("ms from the first block's start")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
