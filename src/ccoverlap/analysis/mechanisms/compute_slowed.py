"""Compute slowed beside communication: a compute kernel that ran longer beside a collective than alone (its time
alone measured in the doctor's alone window), its cause where the trace shows it, and what a lever would net.

Cause. Released with a collective: the kernel ran at least CO_RELEASED_X times its time alone beside a collective
that started within launch latency (SM_WAIT_TOLERANCE_US) of a compute grid, more than sharing SMs or memory
explains (a second wave at most doubles a grid; a kernel beside the lab's proxy ran at most 1.8x alone,
docs/whatif.md). Measured in held-out programs on an H100: a radix sort's histogram 6.45-7.00x alone where its
collective started within 5 us of the sort's first grid, 0.99-1.25x where it started 84.9 us or more before; an
fp8 amax reduction 9.4x where it started 6.4 us after its collective, 1.3x at 47 us (docs/results.md). What the
block scheduler does with two grids released together is not in the trace; one hardware queue (max-connections)
dispatches them one after the other in launch order, and realized 12-15% on both, so it is the lever priced, at
most the kernels' time beyond alone (`one_queue`), and fewer or smaller NCCL CTAs are not (they realized nothing
there). A wave tail: the kernel's grid is one full wave (every SM at its residency, the occupancy model:
`holds_every_sm`) and the collective's CTAs, resident when it started, held SMs it could not share (`capacity` < its
grid), so blocks spilled into a second wave. Otherwise the kernel shared SMs, or memory bandwidth, with the
collective: the trace cannot tell which, and says "unknown".

Levers, each priced on both sides (NOTES: NCCL_MAX_CTAS=8 made such a step 1.5x slower, 4 made it 2.7x): fewer
NCCL CTAs (`nccl-ctas=V`) or smaller ones (`nccl-threads`) stretch every NCCL collective by the CTAs or threads
taken away (its throughput per CTA taken as constant), and relieve the compute: a wave tail only where the
occupancy model says the grid then fits in one wave beside them, any other slowdown entirely (an upper bound: the
trace cannot tell how much). The replay of both says the net, and a lever whose net is no gain is never
named (recommend.py). An SM partition gives a one-full-wave grid the same second wave on the SMs left to it,
copy-engine collectives (which take no SMs) are NCCL's where it offers them and no lever here, and launching the
collective after the grid's dispatch makes it wait for the grid's blocks to retire: the verdict says so.
"""
from __future__ import annotations

import dataclasses
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ccoverlap.analysis.mechanisms.base import (COMPUTE_SLOWED, SM_WAIT_TOLERANCE_US, Mechanism, holds_every_sm,
                                                resident)
from ccoverlap.analysis.model import KernelEvent, short_name
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits
from ccoverlap.model.occupancy import beside
from ccoverlap.model.planner import NCCL_SIMPLE_EXTRA_WARP
from ccoverlap.util.errors import UsageError

if TYPE_CHECKING:
    from ccoverlap.analysis.contention import CommWait, Pending, RankDiagnosis

WAVE_TAIL = "wave_tail"
CO_RELEASED = "co_released"  # started with a collective and ran far longer than sharing explains (module)
UNKNOWN = "unknown"  # shared SM throughput or memory bandwidth: the trace cannot tell which
#: a kernel released with a collective is read as co_released from this many times its time alone (module)
CO_RELEASED_X = 3.0


@dataclass(frozen=True)
class Slowed:
    """One compute kernel that ran longer beside communication than alone."""

    index: int  # in trace.kernels
    name: str
    measured_us: float
    alone_us: float
    cause: str  # CO_RELEASED, WAVE_TAIL or UNKNOWN
    footprint: KernelFootprint | None
    beside: tuple[KernelFootprint, ...]  # the collectives' CTAs resident at its start (their footprints)
    spilled: int = 0  # blocks past one wave (a wave tail)
    span_us: tuple[float, float] = (0.0, 0.0)  # its start and end, trace time

    def to_dict(self) -> dict:
        return {"name": self.name, "measured_us": self.measured_us, "alone_us": self.alone_us, "cause": self.cause,
                "grid": self.footprint.grid if self.footprint else None, "spilled_blocks": self.spilled}


def capacity(device: DeviceLimits, k: KernelFootprint, comm: Sequence[KernelFootprint]) -> int:
    """Blocks of `k` that start at once while `comm`'s CTAs hold SMs (one CTA an SM): full residency on the SMs
    they leave free, and on theirs as many as fit beside one CTA (the largest of them)."""
    per_sm = resident(device, k)
    held = min(device.sm_count, sum(min(c.grid, device.sm_count) for c in comm))
    if not held or not per_sm:
        return per_sm * device.sm_count
    widest = max(comm, key=lambda c: (c.threads * c.regs, c.smem))
    fit = next((n for n in range(per_sm, 0, -1) if _fits(device, widest, k, n)), 0)
    return (device.sm_count - held) * per_sm + held * fit


@lru_cache(maxsize=4096)
def _fits(device: DeviceLimits, comm: KernelFootprint, k: KernelFootprint, n: int, hint: int | None = None) -> bool:
    """Do `n` blocks of `k` start on an SM where one CTA of `comm` (its carveout hint `hint`) runs?"""
    try:
        return beside(device, comm, k, resident_per_sm=1, comm_per_sm=n, resident_hint=hint).fits
    except (UsageError, ValueError):  # a footprint the model cannot place: no room claimed
        return False


def slowed(kernels: Sequence[KernelEvent], indices: Sequence[int], alone: Callable[[KernelEvent], float | None],
           running_comm: Callable[[float, float, int], list[KernelEvent]], device: DeviceLimits | None
           ) -> tuple[Slowed, ...]:
    """The compute kernels of `indices` slower than alone beside a collective (running_comm: the collectives of
    other streams running in an interval), each with its cause."""
    out = []
    starts = sorted(kernels[i].ts for i in indices)

    def released_with(c: KernelEvent) -> bool:  # a compute grid started within launch latency of the collective
        j = bisect_left(starts, c.ts - SM_WAIT_TOLERANCE_US)
        return j < len(starts) and starts[j] <= c.ts + SM_WAIT_TOLERANCE_US

    for i in indices:
        k = kernels[i]
        t = alone(k)
        if t is None or k.dur <= t:
            continue
        comm = running_comm(k.ts, k.end, k.stream)
        if not comm:
            continue
        at_start = tuple(c.footprint for c in comm if c.footprint and c.ts <= k.ts < c.end)
        cause, spilled = UNKNOWN, 0
        if k.dur >= CO_RELEASED_X * t and any(released_with(c) for c in comm):
            cause = CO_RELEASED
        elif device is not None and k.footprint is not None and at_start and holds_every_sm(device, k.footprint):
            room = capacity(device, k.footprint, at_start)
            if room < k.footprint.grid:
                cause, spilled = WAVE_TAIL, k.footprint.grid - room
        out.append(Slowed(i, k.name, k.dur, t, cause, k.footprint, at_start, spilled, (k.ts, k.end)))
    return tuple(out)


def found(p: Pending, comm: Sequence[CommWait]) -> dict[str, Mechanism]:
    """Compute slowed beside collectives: each at its time alone. Compute that ran with no communication beside
    it stays as measured: its spread is not the scheduler's to recover."""
    if not comm or not p.compute_beside_any:
        return {}
    return {COMPUTE_SLOWED: Mechanism(COMPUTE_SLOWED, durations=dict(p.compute_alone), known=p.alone_measured)}


@dataclass(frozen=True)
class CommLever:
    """A lever on the collectives' CTAs: what it makes of a CTA, and how much longer a collective then takes."""

    lever: str  # a strategy term
    shrink: Callable[[KernelFootprint], KernelFootprint | None]  # None: it leaves this CTA as it is

    def stretch(self, fp: KernelFootprint) -> float:
        """The collective's time under the lever over its time now: its CTAs' threads taken away."""
        new = self.shrink(fp)
        return 1.0 if new is None else (fp.grid * fp.threads) / (new.grid * new.threads)

    def price(self, d: RankDiagnosis) -> Mechanism | None:
        """The lever applied to `d`'s replay: the NCCL collectives stretched, the compute relieved where it can
        be (module docstring); None where the lever changes no collective or no slowed kernel."""
        if d.device is None or not d.alone_measured:
            return None
        durations: dict[int, float] = {}
        for c in d.comm:
            fp = c.kernel.footprint
            if fp is not None and _is_nccl(c.kernel) and (f := self.stretch(fp)) > 1.0:
                durations[c.index] = c.kernel.dur * f
        if not durations:
            return None
        relieved = False
        for s in d.compute_slowed:
            if s.cause == CO_RELEASED:  # not the CTAs' doing (module)
                continue
            if s.cause == WAVE_TAIL:
                after = [self.shrink(fp) or fp for fp in s.beside]
                if capacity(d.device, s.footprint, after) < s.footprint.grid:
                    continue
            durations[s.index] = s.alone_us
            relieved = True
        return Mechanism(self.lever, durations=durations) if relieved else None


def _is_nccl(k: KernelEvent) -> bool:
    return "nccl" in k.name.lower() or "rccl" in k.name.lower()


def fewer_ctas(value: str) -> CommLever:
    ctas = int(value)
    return CommLever(f"nccl-ctas={value}",
                     lambda fp: dataclasses.replace(fp, grid=ctas) if fp.grid > ctas else None)


def smaller_ctas(value: str) -> CommLever:
    threads = int(value) + NCCL_SIMPLE_EXTRA_WARP
    return CommLever(f"nccl-threads={value}",
                     lambda fp: dataclasses.replace(fp, threads=threads) if fp.threads > threads else None)


def landing(d: RankDiagnosis, waits: frozenset[int], *, first: bool = False, hint: int | None = None
            ) -> dict[int, float]:
    """What starting the collectives of `waits` at their ready time (priority; with `first`, dispatched ahead of their
    blocker: one hardware queue in launch order) costs the compute beside them: blocker index -> its duration under
    the lever, for the blockers that lose room. `hint`: the collective's own carveout hint under the lever
    (comm-carveout-hint), the configuration an idle SM then takes for it.

    Each collective's CTAs (one an SM, as `capacity` counts them) take SMs from its blocker while both run. Where a
    CTA lands beside blocks of the grid (a grid of several blocks an SM, already dispatching), the SM keeps the
    grid's shared-memory configuration and the grid keeps the blocks that fit beside the CTA there. Where it lands
    on an idle SM (dispatched ahead of the grid; the collective and the grid released at one moment inside one CUDA
    graph launch, the collective first by priority; or a grid of one block an SM, whose retiring blocks leave their
    SM empty), the SM takes the collective's configuration and the grid keeps only the blocks that fit beside the
    CTA under it (the occupancy model's carveout rule read with the collective as the resident: an 8 KB CTA's SM
    takes 100 KB, where 100 KB blocks do not start; measured on an H200, bench/device/comm_hint.sh). The slots lost,
    spread evenly over the grid's slots, lengthen it: a lower bound, as a grid of equal blocks loses whole waves.
    """
    out: dict[int, float] = {}
    dev = d.device
    for c in d.comm:
        b, comm = c.blocker, c.kernel.footprint
        if dev is None or c.index not in waits or b is None or c.blocker_index < 0 or b.footprint is None \
                or comm is None:
            continue
        per_sm = min(resident(dev, b.footprint), -(-b.footprint.grid // dev.sm_count))  # fewer for a small grid
        if not per_sm:
            continue
        idle = first or per_sm == 1 or (b.correlation == c.kernel.correlation != -1 and b.ts >= c.ready_us)
        fit = _fits if idle else _joins
        lost = per_sm - next((n for n in range(per_sm, 0, -1) if fit(dev, comm, b.footprint, n, hint)), 0)
        overlap = min(c.kernel.dur, b.end - max(c.ready_us, b.ts))
        if lost and overlap > 0:
            held = min(comm.grid, dev.sm_count)
            out[c.blocker_index] = (out.get(c.blocker_index, b.dur)
                                    + held * lost * overlap / (per_sm * dev.sm_count))
    return out


@lru_cache(maxsize=4096)
def _joins(device: DeviceLimits, comm: KernelFootprint, k: KernelFootprint, n: int, _hint: int | None = None) -> bool:
    """Does one CTA of `comm` start on an SM where `n` blocks of `k` run (under `k`'s configuration: the collective's
    own hint changes nothing there, measured)? `_fits`'s arguments, the other way round on the SM."""
    try:
        return beside(device, k, comm, resident_per_sm=n).fits
    except (UsageError, ValueError):  # a footprint the model cannot place: no room claimed
        return False


def wave_tail(d: RankDiagnosis) -> Mechanism:
    """Only the wave tails removed: each spilled grid at its time alone (its cost in the step, replayed)."""
    return Mechanism(COMPUTE_SLOWED + ":" + WAVE_TAIL,
                     durations={s.index: s.alone_us for s in d.compute_slowed if s.cause == WAVE_TAIL})


def one_queue(d: RankDiagnosis) -> Mechanism | None:
    """max-connections' share: each kernel released with a collective (CO_RELEASED) at its time alone, at most what
    dispatching the two grids one after the other saves; None where there is none."""
    durations = {s.index: s.alone_us for s in d.compute_slowed if s.cause == CO_RELEASED}
    return Mechanism("max-connections", durations=durations) if durations else None


def one_queue_said(diagnoses: Sequence[RankDiagnosis], ms: float) -> str:
    """`one_queue` in words: the kernel that lost most, how much slower than alone, and what the replay saves."""
    found = [s for d in diagnoses for s in d.compute_slowed if s.cause == CO_RELEASED]
    worst = max(found, key=lambda s: s.measured_us - s.alone_us)
    return (f"{short_name(worst.name)} ran {worst.measured_us / worst.alone_us:.1f}x its time alone beside a "
            f"collective released with a compute grid ({len(found)} launch(es) so), far more than sharing SMs or "
            f"memory explains; one hardware queue dispatches the two grids one after the other: the replay with them "
            f"at their time alone ends {ms:.3f} ms sooner (at most: what the block scheduler does with two grids "
            f"released together is not in the trace, and one queue also orders the program's other streams)")


def story(d: RankDiagnosis) -> str | None:
    """In words, what slowed compute beside communication and why (the kernel that lost most)."""
    if not d.compute_slowed:
        return None
    worst = max(d.compute_slowed, key=lambda s: s.measured_us - s.alone_us)
    tails = [s for s in d.compute_slowed if s.cause == WAVE_TAIL]
    what = f"{short_name(worst.name)} {worst.measured_us / worst.alone_us:.2f}x its time alone"
    if worst.cause == CO_RELEASED:
        return f"{what}, beside a collective released with a compute grid"
    if tails:
        t = max(tails, key=lambda s: s.measured_us - s.alone_us)
        return (f"{what}; wave tail: {short_name(t.name)} (grid {t.footprint.grid}, one full wave) spilled "
                f"{t.spilled} block(s) into a second wave beside the collective's {sum(f.grid for f in t.beside)} "
                f"CTA(s) ({len(tails)} kernel(s))")
    return f"{what}; cause unknown (shared SM throughput or memory bandwidth: the trace cannot tell)"
