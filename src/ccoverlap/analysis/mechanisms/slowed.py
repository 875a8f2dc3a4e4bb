"""Kernels slowed beside the other side: collectives that ran longer beside compute than alone, and compute that
ran longer beside collectives than alone (their measured time alone, the doctor's alone window; unknown without
one, never guessed)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ccoverlap.analysis.mechanisms.base import COMM_SLOWED, COMPUTE_SLOWED, Mechanism

if TYPE_CHECKING:
    from ccoverlap.analysis.contention import CommWait, Pending


def comm_found(p: Pending, comm: Sequence[CommWait]) -> dict[str, Mechanism]:
    """Collectives slowed beside compute: each at its time alone (the ranks' fewest), its wait for a late peer
    kept, never longer than measured."""
    if not comm:
        return {}
    slowed = {c.index: min(c.uncontended_us + c.skew_us, c.kernel.dur) for c in comm
              if c.uncontended_us is not None and c.uncontended_us + c.skew_us < c.kernel.dur}
    return {COMM_SLOWED: Mechanism(COMM_SLOWED, durations=slowed, known=p.alone_measured)}


def compute_found(p: Pending, comm: Sequence[CommWait]) -> dict[str, Mechanism]:
    """Compute slowed beside collectives: each at its time alone. Compute that ran with no communication beside
    it stays as measured: its spread is not the scheduler's to recover."""
    if not comm or not p.compute_beside_any:
        return {}
    return {COMPUTE_SLOWED: Mechanism(COMPUTE_SLOWED, durations=dict(p.compute_alone), known=p.alone_measured)}
