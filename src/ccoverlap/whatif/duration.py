"""How long a CTA runs: its kernel's time alone per wave, slowed by what it shares.

The model, stated once (docs/whatif.md, "The model"):

* A kernel alone runs its full waves of `blocks per SM alone x SMs` CTAs and a last partial one, whose fewer
  CTAs per SM run faster (below), so one CTA's work is `alone_us / waves` microseconds at full pace (`waves`
  counting the partial wave at its pace): simulated alone, every launch takes its time alone. For one wave
  that is the whole launch: a 16-CTA collective's CTA lasts as long as the collective alone.
* A CTA's pace is `(max(W_alone, S) / max(W, S)) ** sm_share / (1 + memory_share x others)`:
  - SM issue share: W is the warps resident on its SM now (every kernel's, its own included), W_alone the
    warps its own kernel's CTAs held there alone (blocks per SM alone x its warps), S = `saturation` x the SM's
    warp slots the warps that saturate its issue. Above S, fewer warps than alone (a wave's tail, a padded
    kernel) run faster and more (another kernel beside it) slower; below S nobody is in anyone's way.
    `sm_share` 0 is no interference, 1 is the SM's issue shared evenly by warps;
  - memory-system share: `others` is 1 while any other kernel runs anywhere on the GPU (HBM and L2 are shared
    by every SM), else 0.
    A launch that its capture shows beside other kernels at its alone pace has its share bounded by what was
    measured (`observed_memory_share`): the calibrated share is an upper bound, never raised.
  - held: a launch the simulated default slows beyond what its capture shows (it shared an SM there, by the
    simulator's own reading, and slowed less) runs no slower than the capture shows the whole launch ran
    (`Kernel.held`, set by `anchor.hold`; a launch that did not slow, no slower than alone): the calibrated pace is
    one figure for every kernel, and the capture bounds its slowdown for this one. Faster than alone it may still
    run, where fewer warps share its SM than alone (a padded kernel, a wave's tail).
* L1 left to a collective's CTA: an SM's unified L1/shared-memory array (`UNIFIED_KB`) holds what its configuration
  does not give to shared memory as L1, where a streaming CTA's loads in flight land; a collective's CTA moves data at
  a rate bounded by the L1 it has (the L1 left, shared by the collectives' CTAs on that SM), in proportion up to
  `l1_need` bytes, at full rate above: its pace is multiplied by `min(1, L1 now / l1_need) / min(1, L1 alone /
  l1_need)`, L1 alone being what each of its CTAs had when its time alone was measured (its own configuration). An SM
  keeps its configuration for a kernel that waited for it (ready before the SM's last block left) where that kernel's
  own is no larger (`residency.place`), so a collective that takes the SMs of a kernel with a large shared-memory
  configuration as they free runs with that kernel's small L1. `l1_need` is read off the collective's sweep
  (`calibration.fit_l1_need`); None: no such bound (an uncalibrated GPU, or one whose L1 size is not known). A
  collective its capture shows running faster than that (one that does not stream, a spin) is held to what was
  measured (`held`, above), as for any other slowdown.
* `sm_share`, `saturation` and `memory_share` are fitted once per GPU on recorded lab runs (`calibration`); nothing is
  fitted per program.

A kernel of many waves is simulated in coarser CTAs (the CTAs of all but its last wave merged so at most
`max_waves` waves remain, and none shorter than `min_cta_us` alone, each merged CTA doing their work; the last
wave's CTAs kept as they are): the same footprint, total work and residency, and the same moment the grid is
fully dispatched.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ccoverlap.model.limits import DeviceLimits
from ccoverlap.whatif.residency import alone_per_sm, config_for

if TYPE_CHECKING:  # step.py reads the capture's bound on a kernel's memory share from here
    from ccoverlap.whatif.step import Kernel

#: A launch's duration in a capture and its time alone are two measurements: a difference below this allowance
#: (1 us, the scale of launch jitter, plus 1% of the time alone) is not read as a slowdown, so the capture bounds
#: a kernel's memory share only where it clearly did not slow.
ALLOWANCE_US, ALLOWANCE_SHARE = 1.0, 0.01

#: The unified L1 / shared-memory array of one SM (KiB) by compute capability (CUDA C++ Programming Guide, the
#: compute capability 8.x and 9.0 sections): what a configuration does not give to shared memory is L1.
UNIFIED_KB: dict[tuple[int, int], int] = {(8, 0): 192, (8, 6): 128, (8, 7): 192, (8, 9): 128, (9, 0): 256}


def l1_left(device: DeviceLimits, config: int) -> int | None:
    """L1 (B) an SM configured with `config` B of shared memory has; None where the device's array is not known."""
    kb = UNIFIED_KB.get(tuple(device.compute_capability)) if device.vendor == "nvidia" else None
    return None if kb is None else max(kb * 1024 - config, 0)


@dataclass(frozen=True)
class Pace:
    """The slowdown model's parameters (fitted by `calibration`)."""

    sm_share: float = 0.5
    memory_share: float = 0.1
    saturation: float = 0.5
    max_waves: int = 6
    min_cta_us: float = 50.0
    l1_need: float | None = None  # L1 (B) a collective's CTA needs for its full rate (None: no L1 bound)

    def l1_factor(self, alone_l1: float | None, now_l1: float | None) -> float:
        """A collective's CTA's pace with `now_l1` bytes of L1 over its pace with `alone_l1` (what it had alone)."""
        if self.l1_need is None or alone_l1 is None or now_l1 is None:
            return 1.0
        return min(1.0, now_l1 / self.l1_need) / max(min(1.0, alone_l1 / self.l1_need), 1e-9)

    def pace(self, alone_warps: int, warps_now: int, device: DeviceLimits, others_running: bool,
             memory_bound: float | None = None, held: float | None = None, l1: float = 1.0) -> float:
        """Work done per us by one CTA whose kernel held `alone_warps` warps of its SM alone, on an SM holding
        `warps_now` warps now; `memory_bound`: the most memory share its capture allows it (`observed_memory_share`;
        None: the calibrated share); `held`: the slowest pace its capture allows it (`anchor.hold`; None: no bound);
        `l1`: a collective's factor for the L1 it has (`l1_factor`), within that bound."""
        floor = self.saturation * device.max_warps_per_sm
        share = self.memory_share if memory_bound is None else min(self.memory_share, memory_bound)
        pace = l1 * (max(alone_warps, floor) / max(warps_now, floor)) ** self.sm_share / (1 + share * others_running)
        return pace if held is None else max(pace, held)

    def unshared(self) -> Pace:
        """The same model with no kernel slowed by what shares its SM or the memory system: the other end of what a
        capture allows where its kernels never ran side by side as a lever would make them (`predict.pace_range`)."""
        return replace(self, sm_share=0.0, memory_share=0.0, l1_need=None)

    def blocks(self, device: DeviceLimits, k: Kernel) -> tuple[tuple[int, float], ...]:
        """(CTAs simulated, work of each in us at full pace) for kernel `k`, in groups in dispatch order: its grid
        now, each CTA doing the work of one CTA of the launch as measured alone (`Kernel.measured`: a padded
        kernel's CTAs do the same work, in more waves). A grid of more than `max_waves` waves has the CTAs of its
        earlier waves merged and those of its last wave kept as they are, so it is fully dispatched (what a later
        grid of its priority waits for) when its real last wave starts, not a merged wave's length earlier."""
        basis, hint = k.measured
        work = k.alone_us / self.waves(device, basis, hint) * basis.grid / k.footprint.grid  # regridded: same work
        grid = k.footprint.grid
        wave = alone_per_sm(device, k.footprint, k.hint) * device.sm_count
        now = -(-grid // wave)
        waves_kept = max(1, min(self.max_waves, int(k.alone_us // self.min_cta_us)))
        if now <= waves_kept:
            return ((grid, work),)
        last = grid - (now - 1) * wave
        merge = -(-(now - 1) // max(waves_kept - 1, 1))
        return ((-(-(grid - last) // merge), work * merge), (last, work))

    def waves(self, device: DeviceLimits, fp, hint: int | None) -> float:
        """How many CTA durations a launch alone lasts: its full waves, and a last partial wave whose CTAs, fewer
        per SM (`ceil(left / SMs)` of `per_sm`), run faster by the SM-issue share."""
        per_sm = alone_per_sm(device, fp, hint)
        full, left = divmod(fp.grid, per_sm * device.sm_count)
        if not left or not full:  # one partial wave alone is the reference pace itself
            return full or 1
        warps = -(-fp.threads // device.warp_size)
        return full + 1 / self.pace(per_sm * warps, min(per_sm, -(-left // device.sm_count)) * warps, device, False)

    def alone_warps(self, device: DeviceLimits, k: Kernel, warp: int) -> int:
        """Warps of its kernel one SM held when `alone_us` was measured."""
        basis, hint = k.measured
        per_sm = min(alone_per_sm(device, basis, hint), -(-basis.grid // device.sm_count))
        return per_sm * -(-basis.threads // warp)

    def alone_l1(self, device: DeviceLimits, k: Kernel) -> float | None:
        """L1 (B) each CTA of its kernel had on its SM when `alone_us` was measured: the L1 its own configuration
        leaves, shared by its CTAs there."""
        basis, hint = k.measured
        left = l1_left(device, config_for(device, basis, hint))
        per_sm = min(alone_per_sm(device, basis, hint), -(-basis.grid // device.sm_count))
        return None if left is None else left / max(per_sm, 1)


def allowance(alone_us: float) -> float:
    """How much longer than `alone_us` a launch may measure and still count as not slowed (two measurements)."""
    return ALLOWANCE_US + ALLOWANCE_SHARE * alone_us


def observed_memory_share(alone_us: float, measured_us: float, beside_us: float) -> float | None:
    """The most memory-system share a launch's capture allows it: it ran `measured_us` where alone it runs
    `alone_us`, `beside_us` of it while another kernel ran. At share m its work is done at 1 / (1 + m) beside
    others, so it lasts `excess = beside x m / (1 + m)` longer: m = excess / (beside - excess), with the excess read
    generously (the measurements' allowance added). The calibrated share is one figure for every kernel (fitted on
    the lab's memory-streaming ones too); a kernel that ran beside others at its alone pace (a compute-bound or
    latency-bound kernel, a spin) does not share the memory system, and the capture says so. None where it ran
    beside nothing, or slowed more than any share explains (no bound: other mechanisms slowed it)."""
    excess = max(0.0, measured_us - alone_us) + allowance(alone_us)
    return excess / (beside_us - excess) if beside_us > excess else None
