"""Build ccoverlap's CUDA kernels (kernels.cu) with NVRTC and launch them through the driver.

One module serves the lab (compute kernels, the reduce-copy proxy) and the bench's emulation
(the paced proxy, `bench/proxy.py`). A communication proxy is compiled so its footprint matches
a target (e.g. the installed NCCL's): static shared memory is a build macro, and the register
count is reached by raising the loads in flight (UNROLL) under a register cap until the
compiled kernel is within 8 registers of the target without spilling.
"""
from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass
from functools import cache
from importlib import resources

from ccoverlap.gpu import cuda_driver as cu
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.gpu.nvrtc import compile_cubin

SOURCE = resources.files("ccoverlap.lab").joinpath("kernels.cu").read_text()
FUNC_LOCAL_SIZE_BYTES = 3
REGISTER_TOLERANCE = 8
CARVEOUT_DEFAULT = -1  # the preferred-carveout attribute's "no preference" (CU_SHAREDMEM_CARVEOUT_DEFAULT)


@dataclass(frozen=True)
class CudaKernel:
    """A loaded CUkernel and what one block of it asks of an SM (threads and dynamic smem at launch)."""

    handle: int
    name: str
    regs: int
    static_smem: int
    unroll: int = 0  # comm proxies: elements in flight per thread (UNROLL); 0 for the others

    def footprint(self, threads: int, dynamic_smem: int = 0, grid: int = 1, cluster: int = 1) -> KernelFootprint:
        return KernelFootprint(threads, self.regs, self.static_smem, dynamic_smem, grid, cluster, self.name)

    def prefer_carveout(self, percent: int | None) -> None:
        """Set the kernel's preferred shared-memory carveout in percent (None: no preference), on device 0."""
        value = CARVEOUT_DEFAULT if percent is None else percent
        cu.driver().set_kernel_attribute(cu.FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT, self.handle, value, 0)

    def launch(self, grid: int, block: int, stream: int, args: list, shared_mem: int = 0, cluster: int = 1) -> None:
        if shared_mem + self.static_smem > cu.DEFAULT_SMEM_PER_BLOCK:  # the default limit counts static and dynamic
            _allow_all_dynamic_smem(self.handle, self.static_smem)
        cu.driver().launch(self.handle, grid, block, shared_mem, stream, args, cluster)


@cache
def _allow_all_dynamic_smem(handle: int, static_smem: int) -> None:
    """Raise the kernel's dynamic shared-memory limit to the opt-in maximum, once."""
    drv = cu.driver()
    optin = drv.device_attribute(cu.ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, drv.device(0))
    drv.set_kernel_attribute(cu.FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, handle, optin - static_smem, 0)


def build(arch: str, names: list[str], options: tuple[str, ...] = ()) -> dict[str, CudaKernel]:
    """Compile SOURCE for `arch` with `options` and load `names` as CUkernels."""
    drv = cu.driver()
    handles = drv.load_kernels(compile_cubin(SOURCE, arch, options), names)
    return {
        name: CudaKernel(h, name, drv.kernel_attribute(cu.FUNC_NUM_REGS, h, 0),
                         drv.kernel_attribute(cu.FUNC_SHARED_SIZE_BYTES, h, 0))
        for name, h in handles.items()
    }


def build_compute(arch: str, fma_regs: int) -> dict[str, CudaKernel]:
    """fma_kernel capped at `fma_regs` registers; triad and sleep kernels as compiled."""
    return build(arch, ["fma_kernel"], (f"--maxrregcount={fma_regs}",)) | build(arch, ["triad_kernel", "sleep_kernel"])


@cache  # one build per footprint: every case of a run uses the same proxy
def build_comm_proxy(arch: str, regs: int, static_smem: int, name: str = "comm_proxy") -> CudaKernel:
    """A communication proxy (`comm_proxy`: the lab's reduce-copy; `comm_paced`: the bench's paced
    emulated collective) with `static_smem` bytes of static shared memory and ~`regs` registers."""
    best = None
    for unroll in range(1, 17):
        opts = (f"-DSTATIC_BYTES={max(static_smem, 16)}", f"-DUNROLL={unroll}", f"--maxrregcount={regs}")
        kernel = dataclasses.replace(build(arch, [name], opts)[name], unroll=unroll)
        if cu.driver().kernel_attribute(FUNC_LOCAL_SIZE_BYTES, kernel.handle, 0):
            break  # spilling: more unrolling only spills more
        best = kernel
        if abs(kernel.regs - regs) <= REGISTER_TOLERANCE:
            break
    if best is None:
        raise RuntimeError(f"could not build {name} with {regs} registers without spills")
    return best


def pace(total: int, max_ctas: int, per_step: int, duration_ns: float) -> tuple[int, int]:
    """(CTAs, ns per step) for `comm_paced` moving `total` elements, `per_step` per CTA step, in
    `duration_ns`: no more CTAs than steps of work, each CTA pacing itself step by step."""
    ctas = max(1, min(max_ctas, -(-total // per_step)))
    steps = -(-(-(-total // ctas)) // per_step)
    return ctas, int(duration_ns) // steps


def ptr(tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(tensor.data_ptr())
