"""Collectives slowed beside compute: each ran longer beside compute than alone (its measured time alone, the
doctor's alone window; unknown without one, never guessed). Compute slowed beside them: compute_slowed.py."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ccoverlap.analysis.mechanisms.base import COMM_SLOWED, Mechanism

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
