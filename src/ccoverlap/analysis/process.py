"""What is known of a rank's process besides its trace (Kineto records neither): the doctor fills it from its
records and passes it in; a trace analysed on its own has none."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ccoverlap.control.interposer import LaunchStats


@dataclass(frozen=True)
class Process:
    """What the launch interposer saw a rank's process launch (its stats), the scheduling variables it ran with,
    its alone window's trace as the doctor recorded it (None: looked for beside the trace, by its name), the
    topologies of the CUDA graphs it captured, and its steps' median times outside and inside the profiler's
    window (what the profiler cost: the trace shows only the profiled steps)."""

    launches: LaunchStats | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    alone: Path | None = None
    graphs: tuple[dict, ...] = ()  # the CUDA graphs it captured, as the capture wrote them (analysis/graphs.py)
    graphs_skipped: tuple[str, ...] = ()  # why a graph it captured was not read
    step_ms: tuple[float | None, float | None] = (None, None)  # median step unprofiled, profiled (GPU period)
