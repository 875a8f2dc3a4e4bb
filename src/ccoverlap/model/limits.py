"""Per-SM hardware limits: named presets and readings from the live GPU.

Every occupancy and planning computation takes a `DeviceLimits`; presets let
people plan for GPUs they do not have in hand (and let CI run without one).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ccoverlap.util.errors import UsageError
from ccoverlap.gpu import cuda_driver as cu


@dataclass(frozen=True)
class DeviceLimits:
    """What one SM (NVIDIA) or CU (AMD) offers to resident blocks.

    Shared-memory numbers are bytes; `smem_per_sm` is what blocks may use at
    the default carveout, `smem_per_block_optin` excludes the per-block
    reservation. Registers are 32-bit registers.
    """

    name: str
    vendor: str  # "nvidia" or "amd"
    compute_capability: tuple[int, int]  # (major, minor); gfx9.0.a is (9, 0) on AMD
    sm_count: int
    warp_size: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    regs_per_sm: int
    regs_per_block: int
    reg_alloc_unit: int  # registers per warp are rounded up to this
    max_regs_per_thread: int
    reg_subpartitions: int  # register-file sub-partitions (NVIDIA) or SIMDs (AMD) per SM
    smem_per_sm: int
    smem_per_block_optin: int
    smem_reserved_per_block: int
    smem_alloc_unit: int
    max_cluster_size: int  # portable cluster size; 1 where clusters do not exist
    stream_priority_range: tuple[int, int]  # (least, greatest); greatest is the highest priority
    # Shared-memory configurations an SM can take (KiB, ascending). None: those of the compute
    # capability (SMEM_CONFIGS_KB), filled in at construction; () where not modelled (AMD).
    smem_configs_kb: tuple[int, ...] | None = None
    source: str = "preset"  # "preset" or "live: <how it was read>"

    def __post_init__(self):
        if self.smem_configs_kb is None:  # frozen: set here, once
            configs = SMEM_CONFIGS_KB.get(self.compute_capability, ()) if self.vendor == "nvidia" else ()
            object.__setattr__(self, "smem_configs_kb", configs)

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    @property
    def arch(self) -> str:
        """The CUDA target name, e.g. sm_90 (what NVRTC and cuobjdump call it)."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# The L1/shared-memory splits an NVIDIA SM supports, by compute capability (KiB): the CUDA C++
# Programming Guide's shared-memory sections for compute capability 8.x and 9.0, as in CUDA's
# cuda_occupancy.h (cudaOccAlignUpShmemSizeVoltaPlus). An SM changes configuration only while idle.
SMEM_CONFIGS_KB: dict[tuple[int, int], tuple[int, ...]] = {
    (8, 0): (0, 8, 16, 32, 64, 100, 132, 164),
    (8, 6): (0, 8, 16, 32, 64, 100),
    (9, 0): (0, 8, 16, 32, 64, 100, 132, 164, 196, 228),
}

# NVIDIA numbers: CUDA C++ Programming Guide, "Compute Capabilities" table
# (threads/blocks/registers/shared memory per SM and per block, 255 registers
# per thread), and cuda_occupancy.h of CUDA 13.0 for the allocation rules
# (256-register units per warp, 4 register-file sub-partitions, 128-byte
# shared-memory units, 1 KiB reserved per block from cc 8.0). SM counts and
# priority ranges are the products' (NVIDIA A40/A100/H100 datasheets;
# cuCtxGetStreamPriorityRange gives (0, -5) on all of them).
_NVIDIA_COMMON = dict(
    vendor="nvidia",
    warp_size=32,
    max_threads_per_block=1024,
    regs_per_sm=65536,
    regs_per_block=65536,
    reg_alloc_unit=256,
    max_regs_per_thread=255,
    reg_subpartitions=4,
    smem_reserved_per_block=1024,
    smem_alloc_unit=128,
    stream_priority_range=(0, -5),
)

# GH100 SXM5, cc 9.0: 2048 threads, 32 blocks, 228 KiB per SM, 227 KiB
# opt-in; 132 SMs (H100 SXM datasheet); portable cluster size 8 (16 with
# the non-portable opt-in).
_GH100 = DeviceLimits(
    name="h100", compute_capability=(9, 0), sm_count=132, max_threads_per_sm=2048,
    max_blocks_per_sm=32, smem_per_sm=233472, smem_per_block_optin=232448,
    max_cluster_size=8, **_NVIDIA_COMMON,
)

#: every preset, by name; the first of a compute capability stands for it (preset_for)
PRESETS: dict[str, DeviceLimits] = {preset.name: preset for preset in (
    # GA102, cc 8.6: 1536 threads and 16 blocks per SM, 100 KiB shared memory
    # per SM, 99 KiB opt-in per block; 84 SMs (A40 datasheet); no clusters.
    DeviceLimits(
        name="a40", compute_capability=(8, 6), sm_count=84, max_threads_per_sm=1536,
        max_blocks_per_sm=16, smem_per_sm=102400, smem_per_block_optin=101376,
        max_cluster_size=1, **_NVIDIA_COMMON,
    ),
    # GA100, cc 8.0: 2048 threads, 32 blocks, 164 KiB per SM, 163 KiB opt-in;
    # 108 SMs (A100 datasheet); no clusters.
    DeviceLimits(
        name="a100", compute_capability=(8, 0), sm_count=108, max_threads_per_sm=2048,
        max_blocks_per_sm=32, smem_per_sm=167936, smem_per_block_optin=166912,
        max_cluster_size=1, **_NVIDIA_COMMON,
    ),
    _GH100,
    # H200: the H100's GH100 with more memory, the same per-SM limits. Read on
    # an H200 through the CUDA driver (bench/results/occupancy-h200-*.json,
    # bench/results/foundation-h200-2026-11-30.json): 132 SMs, 233472 B per SM, 232448 B
    # opt-in, 1 KiB reserved, 2048 threads, 64K registers, 32 blocks per SM,
    # priorities (0, -5).
    dataclasses.replace(_GH100, name="h200"),
    # MI250X, one GCD (gfx90a), from AMD's CDNA2 ISA guide and LLVM's AMDGPU
    # occupancy rules (llvm-calc-occupancy -mcpu=gfx90a): 110 CUs per GCD,
    # wave64, 4 SIMDs per CU with 8 waves each (32 waves = 2048 threads),
    # 512 VGPRs per lane per SIMD (unified VGPR/AGPR file, 512 per thread),
    # allocated in blocks of 8 per wave; 64 KiB LDS per CU and per workgroup,
    # allocated in 512-byte units, no reservation; at most 16 workgroups per CU
    # for multi-wave workgroups; HIP priorities (1, -1). Not validated on AMD
    # hardware: there is none here.
    DeviceLimits(
        name="mi250x", vendor="amd", compute_capability=(9, 0), sm_count=110, warp_size=64,
        max_threads_per_block=1024, max_threads_per_sm=2048, max_blocks_per_sm=16,
        regs_per_sm=4 * 512 * 64, regs_per_block=4 * 512 * 64, reg_alloc_unit=8 * 64,
        max_regs_per_thread=512, reg_subpartitions=4, smem_per_sm=65536,
        smem_per_block_optin=65536, smem_reserved_per_block=0, smem_alloc_unit=512,
        max_cluster_size=1, stream_priority_range=(1, -1),
    ),
)}
PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)


def device_help(otherwise: str) -> str:
    """A --device help string that names every preset: "preset (a40, ...) or <otherwise>"."""
    return f"preset ({', '.join(PRESET_NAMES)}) or {otherwise}"


def preset_for(compute_capability: tuple[int, int], vendor: str = "nvidia") -> DeviceLimits | None:
    """The first preset of `vendor` with this compute capability (9.0: h100), or None: the limits
    to assume for a GPU known only by its compute capability (a trace's deviceProperties)."""
    return next((p for p in PRESETS.values() if p.vendor == vendor and p.compute_capability == compute_capability),
                None)


def _nvidia_arch_constants(major: int) -> dict:
    """Allocation rules the driver does not report (cuda_occupancy.h, CUDA 13.0)."""
    if major < 8:
        raise UsageError(f"compute capability {major}.x is not supported: valid 8.0 and newer")
    return dict(reg_alloc_unit=256, max_regs_per_thread=255, reg_subpartitions=4, smem_alloc_unit=128)


def read_live(ordinal: int = 0, drv=None) -> DeviceLimits:
    """Read the limits of CUDA device `ordinal` through the driver API.

    `drv` defaults to the process's libcuda (ccoverlap.gpu.cuda_driver); tests pass
    a fake with the same methods.
    """
    drv = drv or cu.driver()
    if drv is None:
        props = _rocm_properties(ordinal)
        if props is not None:
            return read_live_rocm(props)
        raise UsageError(f"no CUDA GPU is visible: use a preset with --device ({', '.join(PRESET_NAMES)})")
    count = drv.device_count()
    if not 0 <= ordinal < count:
        raise UsageError(f"device cuda:{ordinal} does not exist: valid cuda:0..cuda:{count - 1}")
    dev = drv.device(ordinal)

    def attr(a: int) -> int:
        return drv.device_attribute(a, dev)

    major = attr(cu.ATTR_COMPUTE_CAPABILITY_MAJOR)
    return DeviceLimits(
        name=drv.device_name(dev),
        vendor="nvidia",
        compute_capability=(major, attr(cu.ATTR_COMPUTE_CAPABILITY_MINOR)),
        sm_count=attr(cu.ATTR_MULTIPROCESSOR_COUNT),
        warp_size=attr(cu.ATTR_WARP_SIZE),
        max_threads_per_block=attr(cu.ATTR_MAX_THREADS_PER_BLOCK),
        max_threads_per_sm=attr(cu.ATTR_MAX_THREADS_PER_MULTIPROCESSOR),
        max_blocks_per_sm=attr(cu.ATTR_MAX_BLOCKS_PER_MULTIPROCESSOR),
        regs_per_sm=attr(cu.ATTR_MAX_REGISTERS_PER_MULTIPROCESSOR),
        regs_per_block=attr(cu.ATTR_MAX_REGISTERS_PER_BLOCK),
        smem_per_sm=attr(cu.ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
        smem_per_block_optin=attr(cu.ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        smem_reserved_per_block=attr(cu.ATTR_RESERVED_SHARED_MEMORY_PER_BLOCK),
        max_cluster_size=8 if attr(cu.ATTR_CLUSTER_LAUNCH) else 1,
        stream_priority_range=drv.stream_priority_range(dev),
        source=f"live: CUDA driver {drv.driver_version()}, device {ordinal}",
        **_nvidia_arch_constants(major),
    )


def _rocm_properties(ordinal: int):
    """torch's device properties on a ROCm build of torch, else None."""
    try:
        import torch
    except ImportError:
        return None
    if getattr(torch.version, "hip", None) and ordinal < torch.cuda.device_count():
        return torch.cuda.get_device_properties(ordinal)
    return None


def read_live_rocm(props) -> DeviceLimits:
    """Limits of a ROCm device from `torch.cuda.get_device_properties` on a HIP build.

    HIP reports SMs, warp size, threads and LDS; the allocation rules come from
    the gfx90a preset (the only CDNA part we model). Not run on AMD hardware here.
    """
    base = PRESETS["mi250x"]
    return dataclasses.replace(
        base,
        name=props.name,
        sm_count=props.multi_processor_count,
        warp_size=getattr(props, "warp_size", base.warp_size),
        max_threads_per_sm=getattr(props, "max_threads_per_multi_processor", base.max_threads_per_sm),
        smem_per_sm=getattr(props, "shared_memory_per_multiprocessor", base.smem_per_sm),
        smem_per_block_optin=getattr(props, "shared_memory_per_block_optin", base.smem_per_block_optin),
        source=f"live: HIP {getattr(props, 'gcnArchName', '?')} with gfx90a allocation rules",
    )


def get_device(device: str | DeviceLimits | None = None) -> DeviceLimits:
    """Resolve a preset name, 'cuda' / 'cuda:N' (live), or pass a DeviceLimits through."""
    if isinstance(device, DeviceLimits):
        return device
    key = (device or "cuda").strip().lower()
    if key in PRESETS:
        return PRESETS[key]
    if key == "cuda" or key.startswith("cuda:"):
        ordinal = key.partition(":")[2] or "0"
        if not ordinal.isdigit():
            raise UsageError(f"--device {device!r}: the GPU index must be a number, as in cuda:0")
        return read_live(int(ordinal))
    raise UsageError(f"unknown device {device!r}: valid {', '.join(PRESET_NAMES)}, cuda or cuda:N")
