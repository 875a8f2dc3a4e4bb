"""An independent, test-only transcription of cuda_occupancy.h's single-kernel rules (CUDA 13.0).

Written from the header, not from csrc/occupancy.c, so the C core is checked
against a second reading of the same rules on presets that have no GPU table.
"""
from ccoverlap.model.limits import DeviceLimits


def cuda_blocks(d: DeviceLimits, threads: int, regs: int, static: int, dynamic: int) -> int:
    warps = -(-threads // d.warp_size)
    by_warps = (d.max_threads_per_sm // d.warp_size) // warps
    per_warp = -(-(regs * d.warp_size) // d.reg_alloc_unit) * d.reg_alloc_unit
    assumed = per_warp * (-(-warps // d.reg_subpartitions) * d.reg_subpartitions)
    if assumed > d.regs_per_block or per_warp * warps > d.regs_per_block:
        by_regs = 0
    else:
        by_regs = ((d.regs_per_sm // d.reg_subpartitions) // per_warp) * d.reg_subpartitions // warps
    total = static + dynamic + d.smem_reserved_per_block
    alloc = -(-total // d.smem_alloc_unit) * d.smem_alloc_unit
    by_smem = d.smem_per_sm // alloc if alloc else 10**9
    return min(by_warps, by_regs, by_smem, d.max_blocks_per_sm)
