"""The one plotting style: a matplotlib `Figure` on the Agg canvas, shared sizes and colours, atomic PNGs.

Library code never touches pyplot's global state or opens a window, so plots
are safe in any process (a server, a test, a rank of a job); matplotlib is
imported lazily, only when a picture is drawn.
"""
from __future__ import annotations

import io
from pathlib import Path

DPI = 110
TITLE_SIZE = 10  # panel titles
SMALL_SIZE = 8  # legends, bar labels, crowded ticks
#: One palette (Paul Tol's bright/muted, colour-blind safe), by what is drawn.
COLORS = {
    "compute": "#4477aa",
    "communication": "#ee7733",
    "memory": "#999999",
    "exposed": "#cc3311",  # exposed communication; also the hatching of padded launches
    "idle": "#dddddd",
    "overlap": "#999933",
    "ideal": "#228833",
    "reference": "#777777",  # a reference line (e.g. the sequential time)
    "edge": "#555555",
}


def new_figure(width: float, height: float, tight: bool = False):
    """A Figure of width x height inches on its own Agg canvas; `tight` lays its subplots out tightly."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="tight" if tight else None)
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig) -> bytes:
    """The figure as PNG, cropped to what is drawn."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def save_png(fig, path: str | Path) -> Path:
    """Write the figure to `path` through the one output path (util/output.write_bytes: all or nothing, a
    device written in place)."""
    from ccoverlap.util.output import write_bytes

    write_bytes(path, png_bytes(fig))
    return Path(path)
