"""CTA admission per SM: may one more block of a kernel start on this SM now?

The rules are model/occupancy's, called, never restated: an idle SM takes the configuration its first kernel
asks for (`hinted_config`: its own maximum occupancy, or its carveout hint), or keeps the one it had for a kernel
that waited for it and asks for no more (`place`); a block of the same kernel joins
while that configuration holds one more (`occupancy` on the configured SM); a block of another kernel joins
where `beside` says it fits (capacity and the carveout rule). Three kernels on one SM are not modelled: a third
kernel waits (said in docs/whatif.md). Clusters: a cluster of C blocks starts only on C SMs of one GPC that
each admit a block at once (GPCs modelled as equal groups of consecutive SMs, `gpc_size`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache

from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits
from ccoverlap.model.occupancy import beside, hinted_config, occupancy


@lru_cache(maxsize=None)
def config_for(device: DeviceLimits, fp: KernelFootprint, hint: int | None) -> int:
    """Shared memory (B) an idle SM is configured with for `fp`'s first block."""
    return hinted_config(device, fp, hint) if device.smem_configs_kb else device.smem_per_sm


@lru_cache(maxsize=None)
def alone_per_sm(device: DeviceLimits, fp: KernelFootprint, hint: int | None) -> int:
    """Blocks of `fp` one SM holds with the SM to itself (configured as `config_for` says)."""
    configured = dataclasses.replace(device, smem_per_sm=config_for(device, fp, hint))
    return occupancy(configured, fp).blocks


@lru_cache(maxsize=None)
def _same(device: DeviceLimits, fp: KernelFootprint, config: int, n: int) -> bool:
    return n <= occupancy(dataclasses.replace(device, smem_per_sm=config), fp).blocks


@lru_cache(maxsize=None)
def _pair(device: DeviceLimits, first: KernelFootprint, hint: int | None, n_first: int,
          other: KernelFootprint, n_other: int) -> bool:
    if n_first == 0:
        return n_other <= alone_per_sm(device, other, None)
    return beside(device, first, other, resident_hint=hint, resident_per_sm=n_first, comm_per_sm=n_other).fits


@dataclass
class SM:
    """What runs on one SM: blocks per kernel index, and which kernel configured it."""

    blocks: dict[int, int] = field(default_factory=dict)
    first: int | None = None  # the kernel whose block found the SM idle
    config: int = 0

    @property
    def idle(self) -> bool:
        return not self.blocks


def admits(device: DeviceLimits, sm: SM, k: int, fp: KernelFootprint, fps, hints) -> bool:
    """Would one more block of kernel `k` (footprint `fp`) start on `sm`? `fps[i]`, `hints[i]`: the others'."""
    if sm.idle:
        return True
    kinds = set(sm.blocks) | {k}
    if len(kinds) > 2:
        return False
    n = dict(sm.blocks)
    n[k] = n.get(k, 0) + 1
    if len(kinds) == 1:
        return _same(device, fp, sm.config, n[k])
    first = sm.first if sm.first in kinds else next(iter(sorted(sm.blocks)))
    other = next(i for i in kinds if i != first)
    return _pair(device, fps[first], hints[first], n.get(first, 0), fps[other], n[other])


def place(device: DeviceLimits, sm: SM, k: int, fp: KernelFootprint, hint: int | None, waited: bool = False) -> None:
    """One more block of kernel `k` on `sm`. An idle SM takes the configuration `k` asks for, unless `k` `waited`
    for it (it was ready before the SM's last block left: the SM passed from one grid to the waiting one) and the
    configuration it had holds at least that: then it keeps it (the rule for a newcomer beside a resident, `beside`,
    applied to the block that just left). Measured on the H200 (lab record of 2026-12-02, attention + proxy): a
    collective waiting for the SMs of a kernel configured for 228 KB of shared memory ran 1.8x its time alone on
    them with nothing else running, and at its time alone on SMs that kernel never held, or launched after it ended."""
    if sm.idle:
        own = config_for(device, fp, hint)
        sm.first, sm.config = k, (sm.config if waited and sm.config >= own else own)
    sm.blocks[k] = sm.blocks.get(k, 0) + 1


def leave(sm: SM, k: int) -> None:
    sm.blocks[k] -= 1
    if not sm.blocks[k]:
        del sm.blocks[k]
        if sm.first == k and sm.blocks:  # the configuration stays; the kernel left holds it now
            sm.first = next(iter(sm.blocks))


def gpc_size(device: DeviceLimits, gpcs: int) -> int:
    """SMs per modelled GPC: the device's SMs in `gpcs` equal groups of consecutive SMs (the last may be short)."""
    return -(-device.sm_count // max(gpcs, 1))
