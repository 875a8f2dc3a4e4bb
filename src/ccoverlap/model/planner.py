"""Resource-aware pad planner: shape compute so communication CTAs find room.

The paper pads compute blocks with extra dynamic shared memory so fewer are
resident per SM. How much is enough depends on what the communication CTA
needs, in every resource at once: a Hopper NCCL CTA holds 52K-61K of an SM's
64K registers, so no shared-memory pad alone can make room for it beside
ordinary compute. The planner says so, names the binding resource, and says
what would make room instead.
"""
from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass, field

from ccoverlap.model import _native
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits, get_device
from ccoverlap.model.occupancy import CARVEOUT, Beside, Resource, beside, carveout_hint, occupancy

#: NCCL_NTHREADS accepts 64..512 in warps; ring LL runs that many threads, ring Simple one warp more
#: (ccoverlap.model.nccl.THREAD_RULES has NCCL's rules; kept here as numbers so the planner needs no NCCL).
NCCL_NTHREADS_RANGE = (64, 512)
NCCL_SIMPLE_EXTRA_WARP = 32
#: The lever that sets the compute kernel's preferred shared-memory carveout.
CARVEOUT_HINT = "carveout-hint"


@dataclass(frozen=True)
class Plan:
    device: str
    compute: KernelFootprint
    comm: KernelFootprint
    per_sm: int  # communication CTAs that must be resident beside compute on one SM
    drain: int  # compute blocks per SM that must retire before the comm CTAs fit (0: at once)
    feasible: bool
    pad_bytes: int  # extra dynamic shared memory per compute block (0 when none is needed)
    compute_blocks_before: int
    compute_blocks_after: int
    comm_blocks_alone: int  # comm CTAs that fit on an empty SM
    binding: Resource | None  # what forbids co-residency when infeasible
    carveout: Beside | None = None  # feasible plans: the SM's shared-memory configuration against the comm CTAs
    carveout_hint: int | None = None  # the compute kernel's preferred carveout (percent) they need; None: not needed
    suggestions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["binding"] = self.binding.value if self.binding else None
        return d

    def explain(self) -> str:
        c, m = self.compute, self.comm
        lines = [
            f"compute: {c.threads} threads x {c.regs} regs, {c.static_smem} B static + {c.dynamic_smem} B "
            f"dynamic shared memory -> {self.compute_blocks_before} blocks/SM",
            f"comm:    {m.threads} threads x {m.regs} regs, {m.static_smem} B static + {m.dynamic_smem} B "
            f"dynamic shared memory, {m.grid} CTAs, cluster {m.cluster} -> {self.comm_blocks_alone} CTA(s)/SM "
            "on an empty SM",
        ]
        if self.feasible and self.pad_bytes == 0:
            fit = "already fit" if self.carveout_hint is None else "fit by capacity"
            lines.append(
                f"plan:    no pad needed: {self.per_sm} comm CTA(s) {fit} beside "
                f"{self.compute_blocks_after} compute blocks per SM."
            )
        elif self.feasible:
            when = "on every SM" if not self.drain else f"once {self.drain} compute block(s) on an SM retire"
            lines.append(
                f"plan:    pad each compute block with {self.pad_bytes} B of dynamic shared memory: "
                f"{self.compute_blocks_before} -> {self.compute_blocks_after} compute blocks/SM, leaving room for "
                f"{self.per_sm} comm CTA(s) {when}."
            )
        else:
            why = self.binding.value.replace("_", " ") if self.binding else "unknown"
            lines.append(f"plan:    infeasible: {why} is the binding resource; no pad of compute makes room.")
        if self.carveout_hint is not None:
            lines.append(
                f"carveout: {self.carveout.explain()}, so they wait for SMs to drain. Fix: {CARVEOUT_HINT} "
                f"{self.carveout_hint} (the compute kernel's preferred shared-memory carveout, in percent)."
            )
        lines += [f"  - {s}" for s in self.suggestions]
        return "\n".join(lines)


def _plan_raw(
    dev: DeviceLimits, compute: KernelFootprint, comm: KernelFootprint, per_sm: int, drain: int | None = 0
) -> _native.CPlan:
    """The C planner: a fixed drain, or None for the drain chosen by the grid (ccov_plan_auto,
    exactly what the interposer's auto mode runs)."""
    out = _native.CPlan()
    args = (
        ctypes.byref(_native.CDevice.of(dev)), ctypes.byref(_native.CKernel.of(compute)),
        ctypes.byref(_native.CKernel.of(comm)), per_sm,
    )
    if drain is None:
        rc = _native.lib().ccov_plan_auto(*args, compute.grid, ctypes.byref(out))
    else:
        rc = _native.lib().ccov_plan_pad_drain(*args, drain, ctypes.byref(out))
    if rc != 0:
        raise AssertionError(f"C core rejected validated input: {compute}, {comm}, per_sm={per_sm}")
    return out


def plan(
    device: str | DeviceLimits,
    compute: KernelFootprint,
    comm: KernelFootprint,
    per_sm: int = 1,
    drain: int | None = 0,
) -> Plan:
    """The smallest pad of `compute` that lets `per_sm` CTAs of `comm` be resident beside it on an SM.

    `drain` compute blocks per SM may have to retire first (0: resident at once).
    None chooses: 1 when the padded compute grid still spans two or more waves
    (a block retires soon, and a higher-priority comm CTA takes its place), else 0.
    That choice is occupancy.c's ccov_plan_auto, the code the interposer's auto mode runs.
    """
    dev = get_device(device)
    compute.validate(dev, "compute")
    comm.validate(dev, "comm")
    if per_sm < 1 or per_sm > dev.max_blocks_per_sm:
        raise ValueError(f"per_sm={per_sm} is out of range: valid 1..{dev.max_blocks_per_sm}")
    if drain is not None and not 0 <= drain <= dev.max_blocks_per_sm:
        raise ValueError(f"drain={drain} is out of range: valid 0..{dev.max_blocks_per_sm}")
    raw = _plan_raw(dev, compute, comm, per_sm, drain)
    drain = raw.drain
    binding = Resource.from_flags(raw.binding)
    result = Plan(
        device=dev.name,
        compute=compute,
        comm=comm,
        per_sm=per_sm,
        drain=drain,
        feasible=bool(raw.feasible),
        pad_bytes=raw.pad_bytes,
        compute_blocks_before=raw.compute_blocks_before,
        compute_blocks_after=raw.compute_blocks,
        comm_blocks_alone=occupancy(dev, comm).blocks,
        binding=binding[0] if binding else None,
    )
    if not result.feasible:
        result.suggestions.extend(_suggestions(dev, result))
        return result
    return _with_carveout(dev, result)


def _with_carveout(dev: DeviceLimits, p: Plan) -> Plan:
    """A feasible plan fits by capacity; the SM's shared-memory configuration may still keep the
    comm CTAs out (occupancy.beside): then name the hint on the padded compute kernel that lets them in."""
    padded = p.compute.padded(p.pad_bytes)
    staying = max(p.compute_blocks_after - p.drain, 0)
    fit = beside(dev, padded, p.comm, resident_per_sm=staying, comm_per_sm=p.per_sm)
    hint = (
        carveout_hint(dev, padded, p.comm, resident_per_sm=staying, comm_per_sm=p.per_sm)
        if fit.blocking == CARVEOUT else None
    )
    return dataclasses.replace(p, carveout=fit, carveout_hint=hint)


def _suggestions(dev: DeviceLimits, p: Plan) -> list[str]:
    """What would make room when shaping cannot: fewer comm threads, fewer CTAs per SM, an SM partition."""
    out = []
    if p.comm_blocks_alone < p.per_sm:
        out.append(
            f"only {p.comm_blocks_alone} comm CTA(s) fit on an empty SM: plan for --per-sm {p.comm_blocks_alone}"
            if p.comm_blocks_alone
            else "the comm CTA does not fit on an SM at all: check its footprint"
        )
    for threads in range(p.comm.threads - dev.warp_size, dev.warp_size - 1, -dev.warp_size):
        smaller = dataclasses.replace(p.comm, threads=threads)
        raw = _plan_raw(dev, p.compute, smaller, p.per_sm, p.drain)
        if raw.feasible:
            lo, hi = NCCL_NTHREADS_RANGE
            settings = [f"NCCL_NTHREADS={n} for NCCL's {protocol}" for n, protocol in
                        ((threads - NCCL_SIMPLE_EXTRA_WARP, "Simple protocol"), (threads, "LL"))
                        if lo <= n <= hi and n % dev.warp_size == 0]
            hint = f" ({', '.join(settings)})" if settings else ""
            out.append(
                f"shrink comm CTAs to {threads} threads{hint}: then a pad of {raw.pad_bytes} B leaves "
                f"{raw.compute_blocks} compute block(s)/SM beside them; each CTA then moves less data per step"
            )
            break
    per_sm_alone = max(p.comm_blocks_alone, 1)
    sms = -(-p.comm.grid // per_sm_alone)
    out.append(
        f"partition SMs: give communication {sms} SM(s) of {dev.sm_count} (green context of "
        f"{dev.sm_count - sms} SMs for compute, or SM carveout {sms}); compute loses "
        f"{100 * sms / dev.sm_count:.0f}% of the SMs"
    )
    return out
