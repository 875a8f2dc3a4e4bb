"""Pictures of an analysis, as PNG bytes: a timeline per rank and bars comparing strategies.

In the one plotting style (ccoverlap.util.plotting): matplotlib's object API on the
Agg canvas, imported only when a picture is drawn.
"""
from __future__ import annotations

from collections.abc import Sequence

from ccoverlap.analysis.intervals import Interval, merge
from ccoverlap.analysis.metrics import exposed_intervals, metric
from ccoverlap.analysis.model import KernelEvent, KernelClass
from ccoverlap.util.plotting import COLORS as PALETTE
from ccoverlap.util.plotting import SMALL_SIZE, TITLE_SIZE, new_figure, png_bytes

COLORS = {kind: PALETTE[kind.value] for kind in KernelClass}
EXPOSED = PALETTE["exposed"]
WAIT = PALETTE["communication"]
_PIXELS = 4000  # intervals closer than span/_PIXELS are drawn as one bar


def _coarse(intervals: list[Interval], gap: float, origin: float) -> list[tuple[float, float]]:
    """Merge intervals closer than `gap`, as (start, width) in ms from `origin`, for broken_barh."""
    out: list[list[float]] = []
    for s, e in merge(intervals):
        if out and s - out[-1][1] <= gap:
            out[-1][1] = e
        else:
            out.append([s, e])
    return [((s - origin) / 1000, (e - s) / 1000) for s, e in out]


def _lane_name(kernels: Sequence[KernelEvent], stream: int) -> str:
    """A stream's lane by what runs on it ("communication, stream 13"): the kind of most of its time."""
    time: dict[KernelClass, float] = {}
    for k in kernels:
        if k.stream == stream:
            time[k.kind] = time.get(k.kind, 0.0) + k.dur
    return f"{max(time, key=time.get).value}, stream {stream}" if time else f"stream {stream}"


#: A collective's wait for SMs (ready -> start) narrower than this share of the span gets no cause label.
_LABELLED = 0.01


def timeline_png(kernels: Sequence[KernelEvent], padded: Sequence[bool], title: str,
                 waits: Sequence[tuple[int, float, float, str]] = ()) -> bytes:
    """One lane per stream (compute, communication, memory by colour; padded launches hatched),
    a top lane with the exposed communication, and each collective's wait for SMs (stream, ready,
    start, cause) drawn before it on its lane, labelled with its cause."""
    from matplotlib.patches import Patch

    origin = min(k.ts for k in kernels)
    gap = (max(k.end for k in kernels) - origin) / _PIXELS
    streams = sorted({k.stream for k in kernels})
    fig = new_figure(12, 1.2 + 0.45 * (len(streams) + 1))
    ax = fig.add_subplot()
    for lane, stream in enumerate(streams, start=1):
        mine = [k for k in kernels if k.stream == stream]
        for kind, color in COLORS.items():
            bars = _coarse([(k.ts, k.end) for k in mine if k.kind is kind], gap, origin)
            ax.broken_barh(bars, (lane - 0.4, 0.8), facecolors=color, linewidth=0)
        marks = _coarse([(k.ts, k.end) for k, p in zip(kernels, padded, strict=True) if p and k.stream == stream],
                        gap, origin)
        ax.broken_barh(marks, (lane - 0.4, 0.8), facecolors="none", edgecolors=EXPOSED, hatch="////", linewidth=0.6)
    ax.broken_barh(_coarse(exposed_intervals(kernels), gap, origin), (-0.4, 0.8), facecolors=EXPOSED, linewidth=0)
    lane_of = {stream: lane for lane, stream in enumerate(streams, start=1)}
    for stream, ready, start, cause in waits:
        x, width = (ready - origin) / 1000, (start - ready) / 1000
        ax.broken_barh([(x, width)], (lane_of[stream] - 0.15, 0.3), facecolors="none", edgecolors=WAIT,
                       hatch="....", linewidth=0.6)
        if start - ready >= _LABELLED * gap * _PIXELS:
            ax.text(x + width / 2, lane_of[stream] - 0.2, cause, ha="center", va="bottom", fontsize=SMALL_SIZE)
    ax.set_yticks(range(len(streams) + 1), ["exposed comm"] + [_lane_name(kernels, s) for s in streams])
    ax.set_ylim(-0.7, len(streams) + 0.7)
    ax.invert_yaxis()
    ax.set_xlabel("ms from the first analysed kernel")
    ax.set_title(title, loc="left", fontsize=TITLE_SIZE)
    ax.legend(
        handles=[Patch(color=c, label=k.value) for k, c in COLORS.items()]
        + [Patch(facecolor="none", edgecolor=EXPOSED, hatch="////", label="padded"),
           Patch(color=EXPOSED, label="exposed communication")]
        + ([Patch(facecolor="none", edgecolor=WAIT, hatch="....", label="collective waiting for SMs")]
           if waits else []),
        loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=SMALL_SIZE, frameon=False,
    )
    return png_bytes(fig)


#: The per-strategy times drawn as bars (metrics.METRICS keys), with their colours.
BAR_METRICS = (
    ("compute_us", COLORS[KernelClass.COMPUTE]), ("communication_us", COLORS[KernelClass.COMMUNICATION]),
    ("exposed_comm_us", EXPOSED), ("idle_us", PALETTE["idle"]),
)
OVERLAP = "comp_comm_overlap_pct"


def _overlap_labels(means: dict[str, dict[str, float | None]]) -> list[str]:
    """The overlap bars' labels: "-" where the table says "-" (no communication to overlap), not a 0.0 bar."""
    return ["-" if m[OVERLAP] is None else f"{m[OVERLAP]:.1f}" for m in means.values()]


def strategy_bars_png(means: dict[str, dict[str, float | None]]) -> bytes:
    """Per strategy (metrics.strategy_values): times (ms, mean per rank) on the left, overlap % on the right."""
    names = list(means)

    def values(key: str, scale: float = 1.0) -> list[float]:
        return [(means[n][key] or 0.0) / scale for n in names]

    fig = new_figure(11, 3.6)
    times, pct = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(BAR_METRICS)
    for i, (key, color) in enumerate(BAR_METRICS):
        xs = [n + (i - (len(BAR_METRICS) - 1) / 2) * width for n in range(len(names))]
        times.bar(xs, values(key, 1000), width, label=metric(key).label, color=color, edgecolor=PALETTE["edge"])
    tilt = {"rotation": 30, "ha": "right", "rotation_mode": "anchor"} if len(names) > 3 else {}  # long names
    times.set_xticks(range(len(names)), names, **tilt)
    times.set_ylabel("ms per rank (mean)")
    times.margins(y=0.25)
    times.legend(fontsize=SMALL_SIZE, frameon=False, ncols=len(BAR_METRICS), loc="upper center")
    bars = pct.bar(range(len(names)), values(OVERLAP), 0.6, color=PALETTE["overlap"])
    pct.bar_label(bars, labels=_overlap_labels(means), fontsize=SMALL_SIZE)
    pct.set_xticks(range(len(names)), names, fontsize=SMALL_SIZE, **tilt)
    pct.set_ylim(0, 105)
    pct.set_ylabel(f"{metric(OVERLAP).label} {metric(OVERLAP).unit}")
    return png_bytes(fig)
