"""Occupancy shaping for kernels you launch yourself (CuPy RawKernel, Triton, torch extensions).

    from ccoverlap.control.shaping import shaped_dynamic_smem
    smem, plan = shaped_dynamic_smem(raw_kernel.kernel.ptr, threads=256)   # CuPy RawKernel
    raw_kernel(grid, (256,), args, shared_mem=smem)

The handle is a CUfunction (CuPy's `RawKernel.kernel.ptr`, Triton's compiled `.function`) or,
with `is_kernel=True`, a CUkernel. Library kernels (cuBLAS, cuDNN, flash-attention) are shaped
by the launch interposer instead (`ccoverlap run`).
"""
from __future__ import annotations

from ccoverlap.gpu import cuda_driver as cu
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits, get_device
from ccoverlap.model.planner import Plan, plan
from ccoverlap.model.nccl import nccl_footprint


def shaped_dynamic_smem(
    handle: int,
    *,
    threads: int,
    dynamic_smem: int = 0,
    comm: KernelFootprint | None = None,
    per_sm: int = 1,
    is_kernel: bool = False,
    device: str | DeviceLimits = "cuda",
    drv=None,
) -> tuple[int, Plan]:
    """Dynamic shared memory to launch with so `per_sm` comm CTAs fit beside each SM's compute blocks.

    `comm` defaults to the installed NCCL's footprint. When the pad needs more than
    the kernel's current dynamic limit, the limit is raised. When no pad can make
    room, `dynamic_smem` comes back unchanged with the infeasible plan (its
    `explain()` says what would).
    """
    drv = drv or cu.driver()
    dev = get_device(device)
    if comm is None:
        comm = nccl_footprint(arch=dev.arch).footprint
    compute = KernelFootprint.from_function(handle, threads=threads, dynamic_smem=dynamic_smem, is_kernel=is_kernel,
                                            drv=drv)
    p = plan(dev, compute, comm, per_sm)
    if not p.feasible or p.pad_bytes == 0:
        return dynamic_smem, p
    total = dynamic_smem + p.pad_bytes
    if is_kernel:
        drv.set_kernel_attribute(cu.FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, handle, total, 0)
    else:
        drv.set_function_attribute(cu.FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, handle, total)
    return total, p
