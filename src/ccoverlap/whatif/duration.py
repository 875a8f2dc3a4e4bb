"""How long a CTA runs: its kernel's time alone per wave, slowed by what it shares.

The model, stated once (docs/whatif.md, "The model"):

* A kernel alone runs `waves = ceil(grid / (blocks per SM alone x SMs))` waves, so one CTA's work is
  `alone_us / waves` microseconds at full pace (for one wave, the whole launch: a 16-CTA collective's CTA
  lasts as long as the collective alone).
* A CTA's pace is 1 / (s_sm x s_mem):
  - SM issue share: `s_sm = 1 + sm_share x W_other / W_max`, W_other the warps of *other* kernels resident on
    its SM, W_max the SM's warp slots (its own kernel's blocks beside it were already there alone);
  - memory-system share: `s_mem = 1 + memory_share` while any other kernel runs anywhere on the GPU (HBM and L2
    are shared by every SM), else 1.
* `sm_share` and `memory_share` are fitted once per GPU on recorded lab runs (`calibration`); nothing is fitted
  per program.

A kernel of many waves is simulated in coarser CTAs (consecutive CTAs merged so at most `max_waves` waves
remain, each merged CTA doing their work): the same footprint, total work and residency, a coarser tail.
"""
from __future__ import annotations

from dataclasses import dataclass

from ccoverlap.model.limits import DeviceLimits
from ccoverlap.whatif.residency import alone_per_sm
from ccoverlap.whatif.step import Kernel


@dataclass(frozen=True)
class Pace:
    """The slowdown model's parameters (fitted by `calibration`)."""

    sm_share: float = 0.5
    memory_share: float = 0.1
    max_waves: int = 6

    def slowdown(self, other_warps: int, device: DeviceLimits, others_running: bool) -> float:
        return (1 + self.sm_share * other_warps / device.max_warps_per_sm) * (1 + self.memory_share * others_running)

    def blocks(self, device: DeviceLimits, k: Kernel) -> tuple[int, float]:
        """(CTAs simulated, work of each in us at full pace) for kernel `k`."""
        per_wave = alone_per_sm(device, k.footprint, k.hint) * device.sm_count
        grid = k.footprint.grid
        waves = -(-grid // per_wave)
        merge = -(-waves // self.max_waves) if waves > self.max_waves else 1
        ctas = -(-grid // merge)
        return ctas, k.alone_us / waves * merge
