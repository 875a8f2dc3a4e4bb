"""Pictures of an analysis, as PNG bytes: a timeline per rank and bars comparing strategies.

matplotlib is imported here only, lazily, and used through its object API
with the Agg canvas: library code never touches pyplot's global state or
opens a window.
"""
from __future__ import annotations

import io
from collections.abc import Sequence

from ccoverlap.analysis.metrics import Interval, exposed_intervals, merge
from ccoverlap.analysis.trace import Kernel, KernelClass

COLORS = {KernelClass.COMPUTE: "#4477aa", KernelClass.COMMUNICATION: "#ee7733", KernelClass.MEMORY: "#999999"}
_PIXELS = 4000  # intervals closer than span/_PIXELS are drawn as one bar


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def _coarse(intervals: list[Interval], gap: float, origin: float) -> list[tuple[float, float]]:
    """Merge intervals closer than `gap`, as (start, width) in ms from `origin`, for broken_barh."""
    out: list[list[float]] = []
    for s, e in merge(intervals):
        if out and s - out[-1][1] <= gap:
            out[-1][1] = e
        else:
            out.append([s, e])
    return [((s - origin) / 1000, (e - s) / 1000) for s, e in out]


def timeline_png(kernels: Sequence[Kernel], padded: Sequence[bool], title: str) -> bytes:
    """One lane per stream (compute, communication, memory by colour; padded launches hatched),
    and a top lane with the exposed communication."""
    from matplotlib.patches import Patch

    origin = min(k.ts for k in kernels)
    gap = (max(k.end for k in kernels) - origin) / _PIXELS
    streams = sorted({k.stream for k in kernels})
    fig = _figure(12, 1.2 + 0.45 * (len(streams) + 1))
    ax = fig.add_subplot()
    for lane, stream in enumerate(streams, start=1):
        mine = [k for k in kernels if k.stream == stream]
        for kind, color in COLORS.items():
            bars = _coarse([(k.ts, k.end) for k in mine if k.kind is kind], gap, origin)
            ax.broken_barh(bars, (lane - 0.4, 0.8), facecolors=color, linewidth=0)
        marks = _coarse([(k.ts, k.end) for k, p in zip(kernels, padded, strict=True) if p and k.stream == stream], gap, origin)
        ax.broken_barh(marks, (lane - 0.4, 0.8), facecolors="none", edgecolors="#cc3311", hatch="////", linewidth=0.6)
    ax.broken_barh(_coarse(exposed_intervals(kernels), gap, origin), (-0.4, 0.8), facecolors="#cc3311", linewidth=0)
    ax.set_yticks(range(len(streams) + 1), ["exposed comm"] + [f"stream {s}" for s in streams])
    ax.set_ylim(-0.7, len(streams) + 0.7)
    ax.invert_yaxis()
    ax.set_xlabel("ms from the first analysed kernel")
    ax.set_title(title, loc="left", fontsize=10)
    ax.legend(
        handles=[Patch(color=c, label=k.value) for k, c in COLORS.items()]
        + [Patch(facecolor="none", edgecolor="#cc3311", hatch="////", label="padded"),
           Patch(color="#cc3311", label="exposed communication")],
        loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False,
    )
    return _png(fig)


BAR_METRICS = (
    ("compute_us", "compute", COLORS[KernelClass.COMPUTE]),
    ("communication_us", "communication", COLORS[KernelClass.COMMUNICATION]),
    ("exposed_comm_us", "exposed communication", "#cc3311"),
    ("idle_us", "idle", "#dddddd"),
)


def strategy_bars_png(means: dict[str, dict[str, float | None]]) -> bytes:
    """Per strategy (metrics.strategy_means): times (ms, mean per rank) on the left, overlap % on the right."""
    names = list(means)

    def values(key: str, scale: float = 1.0) -> list[float]:
        return [(means[n][key] or 0.0) / scale for n in names]

    fig = _figure(11, 3.6)
    times, pct = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(BAR_METRICS)
    for i, (key, label, color) in enumerate(BAR_METRICS):
        xs = [n + (i - (len(BAR_METRICS) - 1) / 2) * width for n in range(len(names))]
        times.bar(xs, values(key, 1000), width, label=label, color=color, edgecolor="#555555")
    tilt = {"rotation": 30, "ha": "right", "rotation_mode": "anchor"} if len(names) > 3 else {}  # long names
    times.set_xticks(range(len(names)), names, **tilt)
    times.set_ylabel("ms per rank (mean)")
    times.margins(y=0.25)
    times.legend(fontsize=8, frameon=False, ncols=len(BAR_METRICS), loc="upper center")
    bars = pct.bar(range(len(names)), values("comp_comm_overlap_pct"), 0.6, color="#999933")
    pct.bar_label(bars, fmt="%.1f", fontsize=8)
    pct.set_xticks(range(len(names)), names, fontsize=8, **tilt)
    pct.set_ylim(0, 105)
    pct.set_ylabel("comp/comm overlap %")
    return _png(fig)
