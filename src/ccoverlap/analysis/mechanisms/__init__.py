"""The mechanisms a replay can remove, one module each behind one table: a new mechanism is a module with a
`found(pending, comm) -> {key: Mechanism}` and one entry in MECHANISMS (and its levers in
recommend.LEVERS_FOR). `late_start` finds no mechanism of its own: it prices priority's share of compute slowed
beside communication from the capture's own steps (a Remedy's `measured`)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ccoverlap.analysis.mechanisms import compute_slowed, slowed, sm_wait
from ccoverlap.analysis.mechanisms.base import Mechanism

if TYPE_CHECKING:
    from ccoverlap.analysis.contention import CommWait, Pending

Finder = Callable[["Pending", "Sequence[CommWait]"], dict[str, Mechanism]]

#: Every mechanism's finder, in the JSON's order: SM-wait by cause (dispatch order among the causes),
#: collectives slowed beside compute, compute slowed beside collectives.
MECHANISMS: tuple[Finder, ...] = (sm_wait.found, slowed.comm_found, compute_slowed.found)


def found(pending: Pending, comm: Sequence[CommWait]) -> dict[str, Mechanism]:
    """Every mechanism of one rank that its first pass and the cross-rank pass found."""
    out: dict[str, Mechanism] = {}
    for finder in MECHANISMS:
        out |= finder(pending, comm)
    return out
