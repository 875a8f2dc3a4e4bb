"""SM-wait by cause: a collective ready to start that waited for SMs, and why (the occupancy model applied to the
footprints of the compute running meanwhile), one mechanism per cause."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ccoverlap.analysis.mechanisms.base import SM_WAIT, SM_WAIT_TOLERANCE_US, Cause, Mechanism, fits_beside
from ccoverlap.analysis.mechanisms.dispatch import dispatching
from ccoverlap.analysis.model import KernelEvent
from ccoverlap.model.limits import DeviceLimits
from ccoverlap.model.nccl import DEFAULT_CLUSTER
from ccoverlap.model.occupancy import CARVEOUT, Resource
from ccoverlap.util.demangle import demangled

if TYPE_CHECKING:
    from ccoverlap.analysis.contention import CommWait, Pending
    from ccoverlap.control.interposer import LaunchStats

#: The occupancy model's blocking resource (`occupancy.Beside.blocking`) as the cause reports name: the one mapping.
RESOURCE_CAUSES: dict[str, Cause] = {
    Resource.REGISTERS.value: Cause.REGISTERS, Resource.WARPS.value: Cause.THREADS,
    Resource.SHARED_MEMORY.value: Cause.SHARED_MEMORY, Resource.BLOCKS.value: Cause.BLOCKS, CARVEOUT: Cause.CARVEOUT,
}


def found(p: Pending, comm: Sequence[CommWait]) -> dict[str, Mechanism]:
    """Each cause's SM-wait: the collectives whose start SMs held back, with a known cause."""
    by_cause: dict[Cause, set[int]] = defaultdict(set)
    for c in comm:
        if c.waited:
            by_cause[c.cause].add(c.index)
    return {SM_WAIT + cause.value: Mechanism(SM_WAIT + cause.value, frozenset(waits))
            for cause, waits in by_cause.items()}


def nccl_cluster(k: KernelEvent, device: DeviceLimits | None) -> int:
    """NCCL's default cluster size for its kernels on sm_90 and newer (Kineto does not record cluster sizes)."""
    sm90 = device is not None and device.vendor == "nvidia" and device.compute_capability >= (9, 0)
    return DEFAULT_CLUSTER if sm90 and k.name.startswith("nccl") else 1


def cause(comm: KernelEvent, blockers: list[KernelEvent], ready: float, device: DeviceLimits | None, cluster: int,
           sm_limits: Mapping[str, int]) -> Cause:
    """Why `comm`, ready at `ready`, did not start beside `blockers` (the compute kernels running meanwhile).

    The blocker that overlapped the wait longest decides by the occupancy model: a resource that does not
    fit beside it, when no SM was idle; `cluster` when SMs were idle but the communication kernel comes in
    clusters; where it fits, `dispatch_order` when an earlier multi-wave grid was still being dispatched. A
    blocker covers at most the SMs its context allowed (`sm_limits`: a green context's, by kernel name).
    """
    top = blockers[0] if blockers else None
    if device is None or comm.footprint is None or top is None or top.footprint is None:
        return Cause.UNKNOWN
    fit = fits_beside(device, top.footprint, comm.footprint)
    if fit is None:
        return Cause.UNKNOWN
    if not fit.fits:
        at = max(ready, top.ts)
        busy = sum(min(sm_limits.get(b.name, device.sm_count), b.footprint.grid)
                   for b in blockers if b.footprint and b.ts <= at < b.end)
        if busy >= device.sm_count:
            return RESOURCE_CAUSES[fit.blocking]
        return Cause.CLUSTER if cluster > 1 else Cause.UNKNOWN
    if any(b.footprint and dispatching(device, b, max(ready, b.ts)) for b in blockers):
        return Cause.DISPATCH_ORDER
    return Cause.UNKNOWN


def assumptions(causes: set[Cause], comm_cluster: int | None, device: DeviceLimits | None,
                 comm: list[CommWait]) -> list[str]:
    """What the causes found rest on that the trace does not record."""
    notes = []
    if Cause.CLUSTER in causes and comm_cluster is None:
        notes.append(f"cluster: Kineto does not record cluster sizes; NCCL's default ({DEFAULT_CLUSTER} on sm_90) "
                     "was assumed")
    if Cause.DISPATCH_ORDER in causes:
        notes.append("dispatch_order: Kineto does not record stream priorities; the grids were taken to have "
                     "the communication's priority")
    if device is None and any(c.sm_wait_us > SM_WAIT_TOLERANCE_US for c in comm):
        notes.append("the trace's deviceProperties name no GPU the occupancy model knows: causes are unknown")
    return notes


def sm_limits(launches: LaunchStats | None) -> dict[str, int]:
    """Kernel name as the trace writes it -> the SMs its context allowed (green contexts), from the interposer's
    stats (which name kernels as the driver does: C++ names mangled, Kineto's demangled)."""
    return {demangled(name): sms for name, sms in launches.sm_limits.items()} if launches else {}


