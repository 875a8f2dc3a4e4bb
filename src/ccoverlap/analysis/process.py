"""What is known of a rank's process besides its trace (Kineto records neither): the doctor fills it from its
records and passes it in; a trace analysed on its own has none."""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ccoverlap.control.interposer import LaunchStats

#: Profiled steps paced by the host: the GPU idled at least this share of the median typical step, and the profiler
#: slowed the steps by at least as much against the program's own (the doctor's step records).
HOST_PACED = 0.05


@dataclass(frozen=True)
class Process:
    """What the launch interposer saw a rank's process launch (its stats), the scheduling variables it ran with,
    its alone window's trace as the doctor recorded it (None: looked for beside the trace, by its name), the
    topologies of the CUDA graphs it captured, its steps' median times outside and inside the profiler's
    window (what the profiler cost: the trace shows only the profiled steps), and whether the doctor held the GPU
    before each profiled step (then a profiled step is the GPU's time for it with its launches queued)."""

    launches: LaunchStats | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    alone: Path | None = None
    graphs: tuple[dict, ...] = ()  # the CUDA graphs it captured, as the capture wrote them (analysis/graphs.py)
    graphs_skipped: tuple[str, ...] = ()  # why a graph it captured was not read
    step_ms: tuple[float | None, float | None] = (None, None)  # median step unprofiled, profiled (GPU period)
    held: bool = False  # its profiled steps began held, their launches queued (doctor/hold.py)

    @property
    def profiler_slowdown(self) -> float | None:
        """None for held steps: their recorded GPU time began before the hold's wait, so it holds the host's."""
        return None if self.held else profiler_slowdown(self.step_ms)

    def host_paced(self, idle_shares: Sequence[float]) -> float | None:
        """The GPU's median idle share of the typical steps (`idle_shares`: each one's idle time over its span) where
        the profiler paced them by the host, else None. Unprofiled the program queues its launches ahead of the
        GPU, so kernels that started one by one in the trace may contend there (measured: a radix sort launched
        after a collective; docs/doctor.md, "Limits"): the doctor says so, the what-if refuses such a capture."""
        slowdown = self.profiler_slowdown
        if slowdown is None or slowdown < HOST_PACED or not idle_shares:
            return None
        share = statistics.median(idle_shares)
        return share if share >= HOST_PACED else None


def profiler_slowdown(step_ms: tuple[float | None, float | None] | None) -> float | None:
    """What the profiler cost a step, from the median step unprofiled and profiled: profiled / unprofiled - 1
    (None where either is unknown). The doctor's verdict reads it (a host-paced capture), the what-if too (its
    predictions scaled to the program's own step)."""
    plain, profiled = step_ms or (None, None)
    return profiled / plain - 1 if plain and profiled else None
