"""Check the occupancy model against the live driver's occupancy API.

Compiles a family of kernels with chosen register pressure and static shared
memory (NVRTC through CuPy), reads each one's footprint back from the driver,
and compares cuOccupancyMaxActiveBlocksPerMultiprocessor with the model over
random launch shapes, shared-memory boundaries included.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass

from ccoverlap.gpu import cuda_driver as cu
from ccoverlap.util.errors import UsageError
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits, read_live
from ccoverlap.model.occupancy import occupancy

_SOURCE = """
extern "C" __global__ void {name}(const float* __restrict__ in, float* __restrict__ out, int n) {{
    {shared}
    float v[{live}];
    #pragma unroll
    for (int i = 0; i < {live}; ++i) v[i] = in[(threadIdx.x * 7 + i * 131) % n];
    float acc = 0.f;
    #pragma unroll
    for (int i = 0; i < {live}; ++i) acc += v[i] * v[({live} - 1 - i)];
    {use_shared}
    #pragma unroll
    for (int i = 0; i < {live}; ++i) out[(blockIdx.x * blockDim.x + threadIdx.x) * {live} + i] = v[i] * acc;
}}
"""


@dataclass(frozen=True)
class Row:
    kernel: str
    regs: int
    static_smem: int
    threads: int
    dynamic_smem: int
    cuda_blocks: int
    model_blocks: int

    @property
    def match(self) -> bool:
        return self.cuda_blocks == self.model_blocks


def _compile(name: str, regs: int, static_smem: int):
    """A kernel that keeps ~`regs` values live, capped at `regs` registers, with `static_smem` bytes."""
    import cupy

    words = static_smem // 4
    shared = f"__shared__ float s[{words}];" if words else ""
    use_shared = (
        f"s[threadIdx.x % {words}] = acc; __syncthreads(); acc += s[(threadIdx.x + 1) % {words}];" if words else ""
    )
    # Below 32 registers, few live values and no cap reach 12-28 registers (sm_90);
    # above, ~regs live values capped at regs give exactly regs.
    live, cap = (max(regs - 8, 1), regs) if regs >= 32 else (max((regs - 10) // 2, 1), 255)
    src = _SOURCE.format(name=name, live=live, shared=shared, use_shared=use_shared)
    module = cupy.RawModule(code=src, options=(f"--maxrregcount={cap}", "--std=c++17"))
    return module.get_function(name).kernel  # a cupy Function: .ptr is the CUfunction


def _launch_shapes(
    rng: random.Random, dev: DeviceLimits, static_smem: int, max_threads: int, count: int
) -> list[tuple[int, int]]:
    """Threads and dynamic shared memory: uniform, warp multiples, and shared-memory unit edges.

    Three shapes in four stay within the kernel's own thread limit (its registers
    allow no more); the fourth may exceed it, where the answer is 0 blocks.
    """
    max_dyn = dev.smem_per_block_optin - static_smem
    shapes = []
    for i in range(count):
        top = dev.max_threads_per_block if i % 4 == 3 else max_threads
        threads = min(rng.randint(1, 32) * 32, top) if i % 2 else rng.randint(1, top)
        kind = i % 4
        if kind == 0:
            dyn = rng.randint(0, max_dyn)
        elif kind == 1:  # just below / at / above an allocation-unit boundary
            edge = rng.randint(0, max_dyn // dev.smem_alloc_unit) * dev.smem_alloc_unit
            dyn = min(max(edge + rng.choice((-1, 0, 1)) - dev.smem_reserved_per_block - static_smem, 0), max_dyn)
        elif kind == 2:  # edges of n blocks per SM
            n = rng.randint(1, dev.max_blocks_per_sm)
            alloc = dev.smem_per_sm // n
            dyn = min(max(alloc + rng.choice((-129, -1, 0, 1, 129)) - dev.smem_reserved_per_block - static_smem, 0),
                      max_dyn)
        else:
            dyn = rng.choice((0, max_dyn, rng.randint(0, 48 * 1024)))
        shapes.append((threads, min(dyn, max_dyn)))
    return shapes


def validate(
    kernels: int = 80,
    shapes_per_kernel: int = 16,
    seed: int = 0,
    ordinal: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[DeviceLimits, list[Row]]:
    """Compare model and driver for `kernels` x `shapes_per_kernel` footprints on a live GPU."""
    drv = cu.driver()
    if drv is None:
        raise UsageError("--validate needs a CUDA GPU")
    try:
        import cupy  # noqa: F401  (NVRTC compiles the kernel family)
    except ImportError:
        raise UsageError("--validate needs CuPy (pip install cupy-cuda12x or cupy-cuda13x)") from None
    dev = read_live(ordinal)
    rng = random.Random(seed)
    rows: list[Row] = []
    for k in range(kernels):
        regs = rng.randint(12, 255)
        static = 0 if k % 5 == 0 else rng.randint(1, 48 * 1024 // 4) * 4
        name = f"occ_r{regs}_s{static}_{k}"
        func = _compile(name, regs, static)
        base = KernelFootprint.from_function(func.ptr, threads=1, drv=drv, name=name)
        drv.set_function_attribute(cu.FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, func.ptr,
                                   dev.smem_per_block_optin - base.static_smem)
        max_threads = drv.function_attribute(cu.FUNC_MAX_THREADS_PER_BLOCK, func.ptr)
        for threads, dyn in _launch_shapes(rng, dev, base.static_smem, max_threads, shapes_per_kernel):
            fp = KernelFootprint(threads, base.regs, base.static_smem, dyn, name=name)
            try:
                cuda_blocks = drv.max_active_blocks(func.ptr, threads, dyn)
            except cu.CudaError:
                cuda_blocks = -1  # recorded as a mismatch: the model always answers
            rows.append(Row(
                kernel=name, regs=fp.regs, static_smem=fp.static_smem, threads=threads, dynamic_smem=dyn,
                cuda_blocks=cuda_blocks, model_blocks=occupancy(dev, fp).blocks,
            ))
        if progress:
            progress(k + 1, kernels)
    return dev, rows


def report(dev: DeviceLimits, rows: list[Row], provenance: dict) -> dict:
    return {
        "provenance": provenance,
        "device_limits": dev.to_dict(),
        "rows_total": len(rows),
        "rows_mismatched": sum(not r.match for r in rows),
        "columns": list(Row.__dataclass_fields__),
        "rows": [list(asdict(r).values()) for r in rows],
    }
