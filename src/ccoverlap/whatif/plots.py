"""The what-if chart: predicted step per strategy with its interval, the capture as simulated as the reference."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ccoverlap.util.plotting import COLORS, SMALL_SIZE, TITLE_SIZE, new_figure, save_png


def title(report: dict) -> str:
    """The chart's title: the capture's whole path (folded at 100 characters, never cut) and what was predicted."""
    said = "predicted, with the assumptions listed beside it" if report["assumptions"] else report["label"]
    source = textwrap.fill(report["source"], 100, break_on_hyphens=False)
    return f"{source}\n{report['predicted_for']}: {said}"


def predictions(report: dict, path: Path) -> Path:
    rows = [p for p in report["predictions"] if p["status"] == "ok"]
    fig = new_figure(7, 0.35 * len(rows) + 1.4, tight=True)
    ax = fig.add_subplot(1, 1, 1)
    names = [p["strategy"] for p in rows]
    steps = [p["step_us"] / 1000 for p in rows]
    exposed = [p["exposed_comm_us"] * p["step_us"] / p["simulated_step_us"] / 1000 for p in rows]  # anchored too
    err = [[(p["step_us"] - p["interval"][0]) / 1000 for p in rows],
           [(p["interval"][1] - p["step_us"]) / 1000 for p in rows]]
    y = range(len(rows))
    ax.barh(y, steps, color=COLORS["compute"], xerr=err, ecolor=COLORS["edge"], label="predicted step")
    ax.barh(y, exposed, left=[s - e for s, e in zip(steps, exposed)], color=COLORS["exposed"],
            label="exposed communication")
    if rows:
        ax.axvline(steps[0], color=COLORS["reference"], linestyle="--", linewidth=1, label="default (measured)")
    ax.set_yticks(list(y), names, fontsize=SMALL_SIZE)
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(title(report), fontsize=TITLE_SIZE)
    # beside the bars, not on them
    ax.legend(fontsize=SMALL_SIZE, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return save_png(fig, path)
