"""Exact occupancy: how many blocks of a kernel are resident on one SM, and why.

Equal to CUDA's cuOccupancyMaxActiveBlocksPerMultiprocessor for every valid
footprint (checked against the H200's driver: tests/data/occupancy_h200.csv).
The arithmetic lives in csrc/occupancy.c; this module validates input and
gives it Python types.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from enum import Enum

from ccoverlap import _native
from ccoverlap.footprint import KernelFootprint
from ccoverlap.limits import DeviceLimits, get_device


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
