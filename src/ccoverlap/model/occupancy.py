"""Exact occupancy: how many blocks of a kernel are resident on one SM, and why.

Equal to CUDA's cuOccupancyMaxActiveBlocksPerMultiprocessor for every valid
footprint (checked against the H200's driver: tests/data/occupancy_h200.csv).
The arithmetic lives in csrc/occupancy.c; this module validates input and
gives it Python types.
"""
from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass
from enum import Enum

from ccoverlap.model import _native
from ccoverlap.util.errors import UsageError, check_range
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits, get_device


class Resource(str, Enum):
    """An SM resource that can limit residency (values match csrc/occupancy.h)."""

    WARPS = "warps"
    REGISTERS = "registers"
    SHARED_MEMORY = "shared_memory"
    BLOCKS = "blocks"

    @property
    def flag(self) -> int:
        return _FLAGS[self]

    @classmethod
    def from_flags(cls, flags: int) -> tuple[Resource, ...]:
        return tuple(r for r in cls if flags & _FLAGS[r])


_FLAGS = {Resource.WARPS: 1, Resource.REGISTERS: 2, Resource.SHARED_MEMORY: 4, Resource.BLOCKS: 8}


@dataclass(frozen=True)
class Occupancy:
    blocks: int  # resident blocks per SM
    limiting: tuple[Resource, ...]  # every resource whose limit equals `blocks`
    limits: dict[str, int]  # blocks allowed by each resource alone
    smem_per_block: int  # allocated bytes, reservation and rounding included
    regs_per_warp: int  # allocated registers per warp

    def to_dict(self) -> dict:
        return {
            "blocks": self.blocks,
            "limiting": [r.value for r in self.limiting],
            "limits": self.limits,
            "smem_per_block": self.smem_per_block,
            "regs_per_warp": self.regs_per_warp,
        }


def occupancy(device: str | DeviceLimits, kernel: KernelFootprint) -> Occupancy:
    """Resident blocks of `kernel` per SM of `device`, with the limiting resources."""
    dev = get_device(device)
    kernel.validate(dev)
    out = _native.COccupancy()
    rc = _native.lib().ccov_occupancy_compute(
        ctypes.byref(_native.CDevice.of(dev)), ctypes.byref(_native.CKernel.of(kernel)), ctypes.byref(out)
    )
    if rc != 0:
        raise AssertionError(f"C core rejected a validated footprint {kernel} on {dev.name}")
    big = 2**31 - 1
    limits = {
        Resource.WARPS.value: out.limit_warps,
        Resource.REGISTERS.value: out.limit_registers,
        Resource.SHARED_MEMORY.value: out.limit_shared_memory,
        Resource.BLOCKS.value: out.limit_blocks,
    }
    return Occupancy(
        blocks=out.blocks,
        limiting=Resource.from_flags(out.limiting),
        limits={k: (None if v == big else v) for k, v in limits.items()},
        smem_per_block=out.smem_per_block,
        regs_per_warp=out.regs_per_warp,
    )


def resident_blocks(
    device: str | DeviceLimits, *, threads: int, regs: int, static_smem: int = 0, dynamic_smem: int = 0
) -> int:
    """Resident blocks per SM for one footprint: cuOccupancyMaxActiveBlocksPerMultiprocessor's number."""
    return occupancy(device, KernelFootprint(threads, regs, static_smem, dynamic_smem)).blocks


def coresident(
    device: str | DeviceLimits, a: KernelFootprint, n_a: int, b: KernelFootprint, n_b: int
) -> tuple[bool, Resource | None]:
    """Do n_a blocks of `a` and n_b blocks of `b` fit on one SM together? (fits, overflowing resource)."""
    dev = get_device(device)
    a.validate(dev)
    b.validate(dev)
    binding = ctypes.c_int()
    rc = _native.lib().ccov_coresident(
        ctypes.byref(_native.CDevice.of(dev)), ctypes.byref(_native.CKernel.of(a)), n_a,
        ctypes.byref(_native.CKernel.of(b)), n_b, ctypes.byref(binding),
    )
    if rc < 0:
        raise ValueError(f"block counts must be >= 0, got {n_a} and {n_b}")
    overflow = Resource.from_flags(binding.value)
    return rc == 1, overflow[0] if overflow else None


def pad_for_blocks(device: str | DeviceLimits, kernel: KernelFootprint, blocks: int) -> int | None:
    """Smallest extra dynamic shared memory leaving at most `blocks` resident; None if impossible."""
    dev = get_device(device)
    kernel.validate(dev)
    pad = _native.lib().ccov_pad_for_blocks(
        ctypes.byref(_native.CDevice.of(dev)), ctypes.byref(_native.CKernel.of(kernel)), blocks
    )
    return None if pad < 0 else pad


# --- Shared-memory carveout: which configuration an SM takes, and who may join it -----------------

#: `Beside.blocking` when every resource fits by capacity but the SM's configuration does not.
CARVEOUT = "carveout"


@dataclass(frozen=True)
class Beside:
    """Can a newcomer's block start on an SM where a resident kernel runs? And if not, why not.

    An SM's shared memory is carved out of its L1 in a few fixed configurations
    (`DeviceLimits.smem_configs_kb`), changed only while the SM is idle. So a
    newcomer that fits by capacity may still wait for the SM to drain.
    """

    fits: bool
    blocking: str | None  # a Resource value, or CARVEOUT; None when it fits
    resident_blocks: int  # resident blocks on the SM
    config: int | None  # shared memory (B) the SM is configured with for the resident; None: not modelled
    comm_needs: int | None  # the smallest configuration (B) the newcomer starts in; None: not modelled
    together: int | None = None  # shared memory (B) the resident's blocks and the newcomer's take at once

    def explain(self) -> str:
        """One line on the configuration, for plans and diagnoses."""
        if self.config is None:
            return "shared-memory configurations are not modelled on this device: capacity only"
        config = f"the SM is configured with {self.config // 1024} KB of shared memory for compute"
        if self.config < self.comm_needs:
            return f"{config}; the comm CTA starts only on an SM configured with {self.comm_needs // 1024} KB or more"
        return (f"{config}: the compute blocks and the comm CTA take {-(-self.together // 1024)} KB together, "
                "more than that")


def smem_config(device: DeviceLimits, nbytes: int) -> int:
    """The smallest shared-memory configuration (bytes) of `device` holding `nbytes`."""
    for kb in device.smem_configs_kb:
        if kb * 1024 >= nbytes:
            return kb * 1024
    raise ValueError(f"{nbytes} B exceed the largest shared-memory configuration of {device.name}")


def full_occupancy_config(device: DeviceLimits, kernel: KernelFootprint) -> int:
    """The configuration that lets `kernel` reach its own maximum blocks per SM.

    A kernel starts only on an SM configured with at least this much (measured on an H200).
    """
    occ = occupancy(device, kernel)
    return smem_config(device, occ.blocks * occ.smem_per_block)


#: The least shared memory (bytes) a block counts for when the driver picks an unhinted kernel's
#: configuration (not for what a newcomer needs, nor for capacity). Measured on an H200
#: (docs/occupancy.md, "Against the H200 table"): kernels of 0 or 1 KB of 128 and 256 threads get
#: 32-64 KB, which bounds it to (2, 4] KB; 2.5 KB is the middle of the (1, 4] KB that the 128- and
#: 1,024-thread residents alone allow.
CONFIG_MIN_PER_BLOCK = 2560


def hinted_config(device: DeviceLimits, kernel: KernelFootprint, hint: int | None) -> int:
    """The configuration an SM takes for `kernel` with its preferred carveout `hint` (percent, None: not set).

    Without a hint: room for the kernel's own maximum blocks per SM, each block
    counted at `CONFIG_MIN_PER_BLOCK` at least. With a hint: hint% of the largest
    configuration, rounded up to one the SM supports, but at least the smallest
    configuration that holds one block (CUDA's cuda_occupancy.h does the same).
    Measured on an H200, beyond cuda_occupancy.h: a kernel without shared memory
    takes hint 0 as no hint, and one whose shared memory is at most the per-block
    reserve (1 KB) gets twice its hint (25% -> 132 KB, 50% and 75% -> 228 KB).
    """
    occ = occupancy(device, kernel)
    own = kernel.static_smem + kernel.dynamic_smem
    if hint is None or (hint == 0 and not own):
        return smem_config(device, occ.blocks * max(occ.smem_per_block, CONFIG_MIN_PER_BLOCK))
    doubled = 0 < own <= device.smem_reserved_per_block
    asked = min((2 if doubled else 1) * hint * device.smem_per_sm // 100, device.smem_per_sm)
    return smem_config(device, max(asked, occ.smem_per_block))


def beside(
    device: str | DeviceLimits,
    resident: KernelFootprint,
    comm: KernelFootprint,
    *,
    resident_hint: int | None = None,
    resident_max_dynamic_smem: int | None = None,
    comm_hint: int | None = None,
    comm_max_dynamic_smem: int | None = None,
    resident_per_sm: int | None = None,
    comm_per_sm: int = 1,
) -> Beside:
    """Whether `comm_per_sm` blocks of `comm` start on an SM that runs `resident`, with the cause if not.

    The SM takes the configuration of the resident (`hinted_config`); the newcomer
    starts if that configuration is at least its own `full_occupancy_config` and
    its blocks fit in every resource (`coresident`, with the configuration as the
    SM's shared memory). Resident blocks per SM: `resident_per_sm`, else its grid
    spread over the SMs, capped by its occupancy. Hints are percent (None: not
    set); max-dynamic values are the function attribute (None: not raised). The
    newcomer's hint and both attributes were measured to change nothing: they
    are checked, not modelled (docs/occupancy.md, "The shared-memory carveout").
    """
    dev = get_device(device)
    for what, hint in (("resident hint", resident_hint), ("comm hint", comm_hint)):
        if hint is not None:
            check_range(what, hint, 0, 100, "percent")
    for what, kernel, attr in (("resident", resident, resident_max_dynamic_smem),
                               ("comm", comm, comm_max_dynamic_smem)):
        if attr is not None:
            check_range(f"{what} max dynamic shared memory", attr, kernel.dynamic_smem,
                        dev.smem_per_block_optin - kernel.static_smem, "bytes (its launch's dynamic .. opt-in)")
    if not occupancy(dev, resident).blocks:
        raise UsageError(f"the resident kernel {resident} cannot run on {dev.name}: 0 blocks per SM")
    modelled = bool(dev.smem_configs_kb)
    config = hinted_config(dev, resident, resident_hint) if modelled else dev.smem_per_sm
    configured = dataclasses.replace(dev, smem_per_sm=config)
    if resident_per_sm is None:
        resident_per_sm = min(occupancy(configured, resident).blocks, -(-resident.grid // dev.sm_count))
    needs = full_occupancy_config(dev, comm) if modelled else None

    together = (resident_per_sm * occupancy(configured, resident).smem_per_block
                + comm_per_sm * occupancy(configured, comm).smem_per_block)

    def result(blocking: str | None) -> Beside:
        return Beside(blocking is None, blocking, resident_per_sm, config if modelled else None, needs, together)

    fits, overflow = coresident(dev, resident, resident_per_sm, comm, comm_per_sm)
    if not fits:
        return result(overflow.value)
    # an SM without resident blocks is idle, and an idle SM takes the newcomer's configuration
    if modelled and resident_per_sm and (
        config < needs or not coresident(configured, resident, resident_per_sm, comm, comm_per_sm)[0]
    ):
        return result(CARVEOUT)
    return result(None)


def fits_beside(
    device: str | DeviceLimits,
    resident: KernelFootprint,
    comm: KernelFootprint,
    *,
    resident_hint: int | None = None,
    resident_max_dynamic_smem: int | None = None,
    comm_hint: int | None = None,
    comm_max_dynamic_smem: int | None = None,
) -> bool:
    """Does a block of `comm` start on an SM running `resident`? (`beside` says why not.)"""
    return beside(
        device, resident, comm, resident_hint=resident_hint, resident_max_dynamic_smem=resident_max_dynamic_smem,
        comm_hint=comm_hint, comm_max_dynamic_smem=comm_max_dynamic_smem,
    ).fits


def carveout_hint(
    device: str | DeviceLimits,
    resident: KernelFootprint,
    comm: KernelFootprint,
    *,
    resident_per_sm: int | None = None,
    comm_per_sm: int = 1,
) -> int | None:
    """The resident's preferred carveout (percent) that lets `comm` start beside it; None if none does.

    The smallest configuration that works, asked for with the largest hint that
    still rounds to it (so rounding to the nearest configuration gives it too).
    """
    dev = get_device(device)
    if not dev.smem_configs_kb:
        return None
    largest_hint = {hinted_config(dev, resident, h): h for h in range(101)}  # ascending: the last hint wins
    for _, hint in sorted(largest_hint.items()):
        if beside(dev, resident, comm, resident_hint=hint, resident_per_sm=resident_per_sm,
                  comm_per_sm=comm_per_sm).fits:
            return hint
    return None
