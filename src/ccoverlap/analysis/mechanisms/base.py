"""What every mechanism module shares: the Mechanism a replay removes, its keys, why a collective did not start
(Cause), and the occupancy model's answers a mechanism asks of a kernel (model/occupancy.py does the arithmetic)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits
from ccoverlap.model.occupancy import Beside, beside, occupancy
from ccoverlap.util.errors import UsageError


class Cause(str, Enum):
    """Why a ready communication kernel did not start."""

    NONE = "none"  # it did not wait (at most SM_WAIT_TOLERANCE_US: launch latency)
    REGISTERS = "registers"
    THREADS = "threads"
    SHARED_MEMORY = "shared_memory"
    CARVEOUT = "carveout"  # fits by capacity, but the SM's shared-memory configuration does not take it
    BLOCKS = "blocks"
    CLUSTER = "cluster"  # SMs were idle, but not enough of one GPC for its cluster
    DISPATCH_ORDER = "dispatch_order"  # room, but an earlier grid of equal priority was still being dispatched
    UNKNOWN = "unknown"  # none of the above explains it, or a dependency before it is unresolved


#: A start at most this long (us) after ready is launch latency, not a wait for SMs.
SM_WAIT_TOLERANCE_US = 10.0

#: The mechanisms a replay can remove besides each cause's SM-wait (whose keys are SM_WAIT + cause).
SM_WAIT = "sm_wait:"
COMM_SLOWED = "comm_slowed"  # collectives ran longer than alone, beside compute
COMPUTE_SLOWED = "compute_slowed"  # compute ran longer than alone, beside collectives


@dataclass(frozen=True)
class Mechanism:
    """One way a rank lost time that a replay can take away: the SM-wait of some collectives (their start held
    back), or kernels slowed beside the other side (their duration against their measured time alone).
    `known` is False for a slowdown that no alone window measured: its cost is unknown, never guessed."""

    key: str  # SM_WAIT + cause, COMM_SLOWED or COMPUTE_SLOWED (or a lever's share of them, recommend.py)
    waits: frozenset[int] = frozenset()  # kernel indices (trace.kernels) started at their ready time
    durations: Mapping[int, float] = dataclasses.field(default_factory=dict)  # kernel index -> its time alone
    known: bool = True


@lru_cache(maxsize=4096)
def fits_beside(device: DeviceLimits, resident: KernelFootprint, comm: KernelFootprint) -> Beside | None:
    try:
        return beside(device, resident, comm)
    except (UsageError, ValueError):  # a footprint the device cannot run: nothing to say
        return None


#: A grid this close to its full residency on every SM (and no more: one wave) holds every SM until it ends.
FULL_WAVE = 0.9


def holds_every_sm(device: DeviceLimits, k: KernelFootprint) -> bool:
    """One wave that fills every SM to its residency (a persistent kernel: blocks never retire to make room)."""
    slots = resident(device, k) * device.sm_count
    return bool(slots) and FULL_WAVE * slots <= k.grid <= slots


@lru_cache(maxsize=4096)
def resident(device: DeviceLimits, k: KernelFootprint) -> int:
    try:
        return occupancy(device, k).blocks
    except (UsageError, ValueError):
        return 0
