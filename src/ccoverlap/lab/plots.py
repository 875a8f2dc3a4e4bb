"""Lab pictures: strategy bars per case and block-residency timelines, in ccoverlap.util.plotting's one style."""
from __future__ import annotations

from pathlib import Path

from ccoverlap.control.levers import NO_OVERLAP
from ccoverlap.util.plotting import COLORS, SMALL_SIZE, TITLE_SIZE, new_figure, save_png


def bars(rows: list[dict], path: Path, order: str = "with") -> Path:
    """Total time per strategy (median, min-max whiskers) with comm completion marked, one panel per case."""
    cases = sorted({(r["compute"], r["comm"]) for r in rows})
    fig = new_figure(10, 2.6 * len(cases), tight=True)
    axes = fig.subplots(len(cases), 1, squeeze=False)
    for ax, (compute, comm) in zip(axes[:, 0], cases):
        mine = [r for r in rows if (r["compute"], r["comm"]) == (compute, comm) and r["status"] == "ok"
                and r["order"] in (order, "with")]
        mine = [r for r in mine if r["strategy"] == NO_OVERLAP or r["order"] == order]
        names = [r["strategy"] for r in mine]
        totals = [r["total_ms"] for r in mine]
        err = [[t - r["total_ms_min"] for t, r in zip(totals, mine)],
               [r["total_ms_max"] - t for t, r in zip(totals, mine)]]
        ax.barh(names, totals, xerr=err, color=COLORS["compute"], label="total (median, min-max)")
        ax.scatter([r["comm_done_ms"] for r in mine], names, color=COLORS["communication"], zorder=3, label="comm done")
        if mine:
            ideal = max(mine[0]["compute_alone_ms"], mine[0]["comm_alone_ms"])
            ax.axvline(ideal, color=COLORS["ideal"], ls="--", lw=1, label="ideal")
            ax.axvline(mine[0]["sequential_ms"], color=COLORS["reference"], ls=":", lw=1, label="sequential")
        ax.set_title(f"{compute} + {comm} proxy (order: comm {order} compute)", fontsize=TITLE_SIZE)
        ax.set_xlabel("ms")
        ax.invert_yaxis()
    axes[0, 0].legend(fontsize=SMALL_SIZE, loc="lower right")
    return save_png(fig, path)


def timeline(timelines: dict, case: tuple[str, str], strategies: list[str], path: Path, order: str = "with") -> Path:
    """Which SM ran which block when: compute blocks blue, comm CTAs orange, one panel per strategy."""
    from matplotlib.collections import LineCollection

    keys = [k for k in ((case[0], case[1], s, order if s != NO_OVERLAP else "with") for s in strategies)
            if k in timelines]
    fig = new_figure(10, 2.2 * len(keys), tight=True)
    axes = fig.subplots(len(keys), 1, squeeze=False, sharex=True)
    for ax, key in zip(axes[:, 0], keys):
        t = timelines[key]
        for side, color, width in (("compute", COLORS["compute"], 0.6), ("comm", COLORS["communication"], 2.5)):
            ax.add_collection(LineCollection([[(s, sm), (e, sm)] for s, e, sm in t[side]], colors=color, lw=width))
        ax.autoscale()
        ax.set_ylabel("SM")
        ax.set_title(f"{key[2]}: comm CTAs (orange) among compute blocks (blue)", fontsize=TITLE_SIZE)
    axes[-1, 0].set_xlabel("ms from the first block's start")
    return save_png(fig, path)
