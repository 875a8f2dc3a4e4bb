"""Bench picture: step time per strategy and workload, in the one plotting style (ccoverlap.util.plotting)."""
from __future__ import annotations

from pathlib import Path

from ccoverlap.bench.catalog import BY_NAME, series
from ccoverlap.control.levers import DEFAULT
from ccoverlap.util.plotting import COLORS, SMALL_SIZE, TITLE_SIZE, new_figure, save_png
from ccoverlap.util.stats import NOISE, Comparison

NOISE_HATCH = "//"


def _whiskers(r: dict) -> tuple[float, float]:
    """Below and above the median: the fastest and slowest step of any of the row's process sets."""
    steps = [x for run in series(r) for x in run]
    return r["step_ms"] - min(steps), max(steps) - r["step_ms"]


def _verdict(r: dict) -> tuple[str, bool]:
    """The bar's label against default, and whether its difference is within noise (hatched)."""
    if r["strategy"] == DEFAULT:
        return "baseline", False
    if r.get("vs_default") is None:
        return "", False
    c = Comparison.from_dict(r["vs_default"])
    return f"{c.ratio:.3f}x {c.verdict}", c.verdict == NOISE


def bars(rows: list[dict], path: Path) -> Path:
    from matplotlib.patches import Patch

    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    fig = new_figure(9, 2.4 * len(workloads), tight=True)
    axes = fig.subplots(len(workloads), 1, squeeze=False)
    for ax, workload in zip(axes[:, 0], workloads):
        kind = BY_NAME[workload].rows
        mine = kind.plotted([r for r in rows if r["workload"] == workload and r["status"] == "ok"])
        labels = [_verdict(r) for r in mine]
        spread = list(zip(*(_whiskers(r) for r in mine))) or [[], []]
        bars_ = ax.barh([r["strategy"] for r in mine], [r["step_ms"] for r in mine], color=COLORS["compute"],
                        xerr=spread, error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": COLORS["edge"]})
        for bar, (text, noise) in zip(bars_, labels):
            if noise:  # hatched and pale: no effect shown, whatever the length
                bar.set(hatch=NOISE_HATCH, alpha=0.45, edgecolor=COLORS["edge"])
        exposed = [(r["strategy"], r["exposed_comm_ms"]) for r in mine if r.get("exposed_comm_ms") is not None]
        if exposed:
            ax.barh([s for s, _ in exposed], [e for _, e in exposed], color=COLORS["exposed"], label="exposed comm")
        handles, names = ax.get_legend_handles_labels()
        if any(noise for _, noise in labels):
            handles.append(Patch(facecolor="white", hatch=NOISE_HATCH, edgecolor=COLORS["edge"]))
            names.append(f"{NOISE} of {DEFAULT}")
        if handles:
            ax.legend(handles, names, fontsize=SMALL_SIZE, loc="upper left", bbox_to_anchor=(1.01, 1))  # off the labels
        for r, (text, _) in zip(mine, labels):  # right of the whisker, so it never covers a bar
            ax.annotate(text, (r["step_ms"] + _whiskers(r)[1], r["strategy"]), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=SMALL_SIZE)
        ax.set_title(kind.plot_title.format(name=workload), fontsize=TITLE_SIZE)
        ax.set_xlabel(f"step ms (median over every process set; whiskers: fastest and slowest step; "
                      f"label: vs {DEFAULT}, by its interval)")
        ax.margins(x=0.25)
        ax.invert_yaxis()
    return save_png(fig, path)
