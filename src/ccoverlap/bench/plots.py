"""Bench picture: step time per strategy and workload, in the one plotting style (ccoverlap.plotting)."""
from __future__ import annotations

from pathlib import Path

from ccoverlap.bench.catalog import BY_NAME
from ccoverlap.plotting import new_figure, save_png


def bars(rows: list[dict], path: Path) -> Path:
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    fig = new_figure(9, 2.4 * len(workloads), tight=True)
    axes = fig.subplots(len(workloads), 1, squeeze=False)
    for ax, workload in zip(axes[:, 0], workloads):
        kind = BY_NAME[workload].rows
        mine = kind.plotted([r for r in rows if r["workload"] == workload and r["status"] == "ok"])
        # whiskers: the fastest and slowest step (micro rows carry only the median)
        spread = [[r["step_ms"] - r.get("step_ms_min", r["step_ms"]) for r in mine],
                  [r.get("step_ms_max", r["step_ms"]) - r["step_ms"] for r in mine]]
        ax.barh([r["strategy"] for r in mine], [r["step_ms"] for r in mine], color="#4c72b0",
                xerr=spread, error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#333333"})
        exposed = [(r["strategy"], r["exposed_comm_ms"]) for r in mine if r.get("exposed_comm_ms") is not None]
        if exposed:
            ax.barh([s for s, _ in exposed], [e for _, e in exposed], color="#c44e52", label="exposed comm")
            ax.legend(fontsize=7)
        ax.set_title(kind.plot_title.format(name=workload), fontsize=10)
        ax.set_xlabel("step ms (median; whiskers: fastest and slowest step)")
        ax.invert_yaxis()
    return save_png(fig, path)
