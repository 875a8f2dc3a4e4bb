"""The communication footprint of the installed NCCL.

Registers and static shared memory are read from libnccl's device code with
`cuobjdump --dump-resource-usage` where both are present. Threads per CTA and
dynamic shared memory are launch-time choices that no binary records: they
come from NCCL's source (measured at launch by the interposer later). Every
number says where it came from.
"""
from __future__ import annotations

import ctypes.util
import glob
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from ccoverlap.cache import cached
from ccoverlap.footprint import KernelFootprint

# NCCL 2.28.9, sm_90, measured on the H200 (../shared/NOTES.md): 96 registers
# and 22592 B static shared memory for every ncclDevKernel_*. NCCL's source:
# 640 threads per CTA for tree/LL128/NVLS/P2P, 544 for ring/simple
# (src/enqueue.cc); dynamic shared memory 20 warps x 4112 B = 82240 B for 640
# threads (src/include/device.h, ncclShmemDynamicSize); clusters of 4 on sm_90.
FALLBACK_REGS = 96
FALLBACK_STATIC_SMEM = 22592
NCCL_THREADS = 640
NCCL_DYNAMIC_SMEM = 82240
NCCL_CLUSTER = 4
NCCL_CTAS = 16  # a typical channel count on one NVLink node; set with NCCL_MIN/MAX_CTAS

#: NCCL 2.28.9's kernels as the launch interposer saw them launched on 2 x H200 (NVLink, world size 2):
#: bench/results/bench-x2-h200-2026-11-30-{all,fsdp,ddp}.json, interposer stats "comm_footprint". NCCL
#: sizes CTAs per collective, protocol and message size; these are the launches we have seen.
OBSERVED_LAUNCHES: dict[str, KernelFootprint] = {
    "allreduce": KernelFootprint(512, 96, 21568, 82240, grid=24, cluster=4, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
    "allgather": KernelFootprint(544, 96, 21568, 82240, grid=24, cluster=4, name="ncclDevKernel_AllGather_RING_LL"),
    "allgather-small": KernelFootprint(128, 96, 21568, 82240, grid=1, cluster=1, name="ncclDevKernel_AllGather_RING_LL"),
    "sendrecv": KernelFootprint(640, 96, 21568, 82240, grid=32, cluster=4, name="ncclDevKernel_SendRecv"),
}

_FUNC = re.compile(r"^\s*Function\s+(\S+?):?\s*$")
_ARCH = re.compile(r"^\s*arch\s*=\s*(sm_\d+a?)")
# Collective kernels, also when C++-mangled (_Z21ncclDevKernel_Generic...); the
# symmetric-memory ncclSymkDevKernel_* have another footprint and no CTA policy.
_COLLECTIVE = re.compile(r"ncclDevKernel|ncclKernel")
_USAGE = re.compile(r"\b(REG|SHARED|STACK):(\d+)")


@dataclass(frozen=True)
class KernelResources:
    name: str
    arch: str
    regs: int
    static_smem: int
    stack: int


@dataclass(frozen=True)
class NcclFootprint:
    footprint: KernelFootprint
    sources: dict[str, str] = field(default_factory=dict)  # field -> where its value came from
    library: str | None = None

    def to_dict(self) -> dict:
        fp = self.footprint
        return {
            "threads": fp.threads, "regs": fp.regs, "static_smem": fp.static_smem,
            "dynamic_smem": fp.dynamic_smem, "ctas": fp.grid, "cluster": fp.cluster,
            "library": self.library, "sources": self.sources,
        }


def parse_resource_usage(text: str) -> list[KernelResources]:
    """Parse `cuobjdump --dump-resource-usage` output into one record per function and arch."""
    out: list[KernelResources] = []
    arch, func = "", None
    for line in text.splitlines():
        if m := _ARCH.match(line):
            arch = m.group(1)
        elif m := _FUNC.match(line):
            func = m.group(1)
        elif func and (usage := {k: int(v) for k, v in _USAGE.findall(line)}):
            out.append(KernelResources(func, arch, usage.get("REG", 0), usage.get("SHARED", 0), usage.get("STACK", 0)))
            func = None
    return out


def find_libnccl() -> str | None:
    """libnccl.so of $CCOVERLAP_NCCL_LIB, of the nvidia-nccl wheel torch uses, or of the system."""
    if path := os.environ.get("CCOVERLAP_NCCL_LIB"):
        return path
    spec = importlib.util.find_spec("nvidia.nccl") if importlib.util.find_spec("nvidia") else None
    for root in (spec.submodule_search_locations or []) if spec else []:
        if hits := sorted(glob.glob(os.path.join(root, "lib", "libnccl.so*"))):
            return hits[0]
    return ctypes.util.find_library("nccl")


def find_cuobjdump() -> str | None:
    if found := shutil.which("cuobjdump"):
        return found
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    candidate = os.path.join(home, "bin", "cuobjdump")
    return candidate if os.access(candidate, os.X_OK) else None


def read_resource_usage(library: str, cuobjdump: str) -> list[KernelResources]:
    """cuobjdump's reading of `library`, cached on disk by the library's path, size and mtime."""
    st = os.stat(library)
    key = f"{library}\0{st.st_size}\0{st.st_mtime_ns}\0{cuobjdump}"
    return parse_resource_usage(cached("cuobjdump", key, lambda: _dump(library, cuobjdump)).decode())


def _dump(library: str, cuobjdump: str) -> bytes:
    proc = subprocess.run([cuobjdump, "--dump-resource-usage", library], capture_output=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"cuobjdump failed on {library}: {proc.stderr.decode(errors='replace').strip()[:200]}")
    return proc.stdout


def footprint_from_resources(kernels: list[KernelResources], arch: str) -> tuple[int, int] | None:
    """(max registers, max static smem) over the collective kernels of `arch`, or None if there are none."""
    mine = [k for k in kernels if _COLLECTIVE.search(k.name) and k.arch == arch]
    if not mine:
        return None
    return max(k.regs for k in mine), max(k.static_smem for k in mine)


def _sm(arch: str) -> int:
    return int(re.sub(r"\D", "", arch) or 0)


def nccl_footprint(arch: str = "sm_90", ctas: int = NCCL_CTAS, read=read_resource_usage) -> NcclFootprint:
    """The footprint of the installed NCCL's collective kernels for `arch`, with each number's source."""
    measured = "../shared/NOTES.md: NCCL 2.28.9 sm_90 measured on an H200 (fallback)"
    source_code = "NCCL source (src/enqueue.cc, src/include/device.h); not read from the binary"
    sources = {"threads": source_code, "dynamic_smem": source_code, "cluster": source_code,
               "ctas": "default; NCCL_MIN_CTAS/NCCL_MAX_CTAS set it"}
    regs, static = FALLBACK_REGS, FALLBACK_STATIC_SMEM
    sources["regs"] = sources["static_smem"] = measured
    library, tool = find_libnccl(), find_cuobjdump()
    if library and tool:
        found = footprint_from_resources(read(library, tool), arch)
        if found:
            regs, static = found
            sources["regs"] = sources["static_smem"] = f"cuobjdump --dump-resource-usage {library} ({arch})"
    fp = KernelFootprint(
        threads=NCCL_THREADS, regs=regs, static_smem=static, dynamic_smem=NCCL_DYNAMIC_SMEM,
        grid=ctas, cluster=NCCL_CLUSTER if _sm(arch) >= 90 else 1, name="nccl",
    )
    return NcclFootprint(fp, sources, library)
