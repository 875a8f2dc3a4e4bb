"""The communication footprint of the installed NCCL.

Registers and static shared memory are read from libnccl's device code with
`cuobjdump --dump-resource-usage` where both are present. Threads per CTA and
dynamic shared memory are launch-time choices that no binary records: they
come from NCCL's source (measured at launch by the interposer later). Every
number says where it came from.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

from ccoverlap.util.cache import cached
from ccoverlap.util.errors import UsageError
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.util.text import shorten

# NCCL 2.28.9, sm_90, read with cuobjdump on the H200 (bench/results/foundation-h200-2026-11-30.json,
# "nccl_footprint"): 96 registers and 22592 B static shared memory for every ncclDevKernel_*. NCCL's source:
# 640 threads per CTA for tree/LL128/NVLS/P2P, 544 for ring/simple
# (src/enqueue.cc); dynamic shared memory 20 warps x 4112 B = 82240 B for 640
# threads (src/include/device.h, ncclShmemDynamicSize); clusters of DEFAULT_CLUSTER from sm_90 on.
FALLBACK_REGS = 96
FALLBACK_STATIC_SMEM = 22592
NCCL_THREADS = 640
NCCL_DYNAMIC_SMEM = 82240
NCCL_CTAS = 16  # a typical channel count on one NVLink node; set with NCCL_MIN/MAX_CTAS

#: NCCL 2.28.9's kernels as the launch interposer saw them launched on 2 x H200 (NVLink, world size 2):
#: bench/results/bench-x2-h200-2026-11-30-{all,fsdp,ddp}.json, interposer stats "comm_footprint". NCCL
#: sizes CTAs per collective, protocol and message size; these are the launches we have seen.
OBSERVED_LAUNCHES: dict[str, KernelFootprint] = {
    "allreduce": KernelFootprint(512, 96, 21568, 82240, grid=24, cluster=4,
                                 name="ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
    "allgather": KernelFootprint(544, 96, 21568, 82240, grid=24, cluster=4, name="ncclDevKernel_AllGather_RING_LL"),
    "allgather-small": KernelFootprint(128, 96, 21568, 82240, grid=1, cluster=1,
                                       name="ncclDevKernel_AllGather_RING_LL"),
    "sendrecv": KernelFootprint(640, 96, 21568, 82240, grid=32, cluster=4, name="ncclDevKernel_SendRecv"),
}
#: The protocol behind each observed launch, read from its threads by NCCL 2.28.9's rules (src/enqueue.cc,
#: topoGetAlgoInfo): ring LL runs NCCL_NTHREADS threads (at most 512); ring Simple adds a warp for sync (512 + 32);
#: the 128-thread AllGather is ring LL on one channel, its threads halved twice for a small message; point-to-point
#: (send/recv, all-to-all) always runs NCCL_MAX_NTHREADS = 640. (The kernel's name says RING_LL whatever runs:
#: NCCL picks one kernel per collective and dispatches the protocol inside it.)
PROTOCOLS: dict[str, str] = {"allreduce": "LL", "allgather": "SIMPLE", "allgather-small": "LL", "sendrecv": "P2P"}

#: bytes one rank sends per byte of the collective's largest buffer, for a ring of n ranks
RING_FACTORS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0 if n > 1 else 0.0,
    "scatter": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
}

# --- NCCL 2.28.9's launch knobs, as it reads them -----------------------------------------------------------

WARP = 32
MAX_CHANNELS = 64  # MAXCHANNELS (src/include/device.h): NCCL_MIN/MAX_CTAS are capped here
MAX_CLUSTER = 8  # NCCL_MAX_CGA_CLUSTER_SIZE (src/init.cc)
DEFAULT_CLUSTER = 4  # the config default of cgaClusterSize (src/init.cc)
#: the ring channels NCCL set up on 2 x H200 (the grid of every observed collective): what NCCL_MAX_CTAS caps
CHANNELS = OBSERVED_LAUNCHES["allreduce"].grid


@dataclass(frozen=True)
class ThreadRule:
    """NCCL_NTHREADS for one protocol (src/graph/tuning.cc getNthreads): the range it accepts, the default,
    and the warps the kernel adds (src/enqueue.cc: ring Simple's sync warp)."""

    lo: int
    hi: int
    default: int
    extra: int = 0


#: ring LL: 64..512, default 512; ring Simple: 64..512, default 512 on NVLink (256 where the ring's bandwidth
#: is PCIe's), plus one sync warp. Point-to-point takes no NCCL_NTHREADS.
THREAD_RULES = {"LL": ThreadRule(2 * WARP, 512, 512), "SIMPLE": ThreadRule(2 * WARP, 512, 512, extra=WARP)}

#: Where NCCL 2.28.9 acts on each NCCL_CTA_POLICY, and why that is nowhere for tensors from PyTorch's caching
#: allocator (no registered buffers, no symmetric windows), NVLS on or off.
CTA_POLICY_REACH = {
    "EFFICIENCY": "EFFICIENCY acts only on AllGather and ReduceScatter with user-registered buffers and NVLS "
                  "(NCCL 2.28.9 src/enqueue.cc getAlgoInfo); PyTorch's allocator registers none",
    "ZERO": "ZERO acts only on AllGather, AlltoAll, Gather and Scatter whose buffers are both in symmetric windows "
            "(ncclCommWindowRegister, NCCL >= 2.28), on copy engines (src/enqueue.cc); "
            "PyTorch's allocator registers none",
}
CTA_POLICY_VALUES = {1: "EFFICIENCY", 2: "ZERO"}  # NCCL_CTA_POLICY's numbers (nccl.h: NCCL_CTA_POLICY_*)
#: the collectives each policy may act on, as a device kernel's name spells them (ncclDevKernel_<Op>_..._<ALGO>_
#: <PROTO>; AlltoAll, Gather and Scatter run as SendRecv), and the algorithm it also needs (None: any)
CTA_POLICY_OPS = {"EFFICIENCY": (("AllGather", "ReduceScatter"), "NVLS"), "ZERO": (("AllGather", "SendRecv"), None)}
#: a collective's operation in its device kernel's name (longest first: AllReduce before Reduce)
_OP = re.compile(r"(AllReduce|ReduceScatter|AllGather|AlltoAll|SendRecv|Broadcast|Reduce)")


def cta_policy_reaches(policy: str, kernel: str) -> bool | None:
    """May NCCL_CTA_POLICY=`policy` change the collective that ran as `kernel`? False where its name names an
    operation (or algorithm) the policy never acts on (CTA_POLICY_REACH), True where it may (whether its buffers are
    registered is not in a trace), None where the name names no operation (a generic kernel: ncclDevKernel_Generic)."""
    if (op := _OP.search(kernel)) is None:
        return None
    ops, algorithm = CTA_POLICY_OPS[policy]
    return op.group(1) in ops and (algorithm is None or algorithm in kernel)


def _int(env: Mapping[str, str], var: str) -> int | None:
    """An NCCL variable as a whole number; None when unset or empty (NCCL: unset). Text that is no number is
    refused: NCCL would read it as 0 (strtoll) and quietly ignore it."""
    text = env.get(var, "").strip()
    if not text:
        return None
    if not re.fullmatch(r"[-+]?[0-9]+", text):
        raise UsageError(f"{var}={text}: a whole number (NCCL reads text as 0 and ignores it)")
    return int(text)


@dataclass(frozen=True)
class Knobs:
    """NCCL 2.28.9's CTA knobs as it reads them (src/init.cc envConfigOverride, src/graph/tuning.cc):
    NCCL_MAX_CTAS caps the channels and NCCL_MIN_CTAS raises them (each ignored at <= 0, capped at 64; a
    minimum above the maximum becomes the maximum); NCCL_NTHREADS sets each protocol's threads (a value
    that is no multiple of 32, or above the maximum, becomes the maximum; below 64 becomes 64);
    NCCL_CGA_CLUSTER_SIZE sets the cluster (0..8; above 8 becomes 8; negative is ignored); NCCL_CTA_POLICY
    0..2 (others: 0). `notes` says what NCCL made of a value it clamps or ignores."""

    max_ctas: int = MAX_CHANNELS
    min_ctas: int = 1
    nthreads: int | None = None  # NCCL_NTHREADS as given; None or <= 0: each protocol's default
    cluster: int = DEFAULT_CLUSTER
    cta_policy: int = 0  # NCCL_CTA_POLICY: 0 default, 1 EFFICIENCY, 2 ZERO (others: 0)
    notes: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Knobs:
        """UsageError for a value that is no whole number."""
        notes: list[str] = []
        bounds = {}
        for var, default in (("NCCL_MAX_CTAS", MAX_CHANNELS), ("NCCL_MIN_CTAS", 1)):
            value = _int(env, var)
            if value is not None and value <= 0:
                notes.append(f"{var}={value} is too low: NCCL ignores it")
                value = None
            elif value is not None and value > MAX_CHANNELS:
                notes.append(f"{var}={value} is above {MAX_CHANNELS} channels: NCCL uses {MAX_CHANNELS}")
                value = MAX_CHANNELS
            bounds[var] = default if value is None else value
        hi, lo = bounds["NCCL_MAX_CTAS"], bounds["NCCL_MIN_CTAS"]
        if lo > hi:
            notes.append(f"NCCL_MIN_CTAS={lo} is above NCCL_MAX_CTAS={hi}: NCCL sets both to {hi}")
            lo = hi
        cluster = _int(env, "NCCL_CGA_CLUSTER_SIZE")
        if cluster is not None and cluster > MAX_CLUSTER:
            notes.append(f"NCCL_CGA_CLUSTER_SIZE={cluster} is too big: NCCL uses {MAX_CLUSTER}")
            cluster = MAX_CLUSTER
        elif cluster is not None and cluster < 0:
            notes.append(f"NCCL_CGA_CLUSTER_SIZE={cluster} is negative: NCCL ignores it")
            cluster = None
        nthreads = _int(env, "NCCL_NTHREADS")
        if nthreads is not None and (why := _nthreads_note(nthreads)):
            notes.append(f"NCCL_NTHREADS={nthreads} {why}")
        policy = _int(env, "NCCL_CTA_POLICY")
        if policy is not None and policy != 0 and policy not in CTA_POLICY_VALUES:
            notes.append(f"NCCL_CTA_POLICY={policy} is not a policy: NCCL uses 0 (default)")
            policy = None
        return cls(hi, lo, nthreads, DEFAULT_CLUSTER if cluster is None else cluster, policy or 0, tuple(notes))

    def channels(self, found: int = CHANNELS) -> int:
        """The ring channels NCCL sets up from the `found` it searched (src/graph/connect.cc)."""
        return max(min(found, self.max_ctas), self.min_ctas)

    def p2p_channels(self, found: int = CHANNELS) -> int:
        """Point-to-point channels: the ring channels rounded up to a power of two (src/graph/paths.cc)."""
        return 1 << (self.channels(found) - 1).bit_length()

    def threads(self, protocol: str, tuned: int) -> int:
        """Threads per CTA for `protocol`, where NCCL's message-size tuning left `tuned` threads at the default
        (src/enqueue.cc topoGetAlgoInfo: halved while a multiple of 128 and too many for the message); P2P: 640."""
        rule = THREAD_RULES.get(protocol)
        if rule is None:
            return NCCL_THREADS
        nt = self.nthreads
        if nt is None or nt <= 0:
            nt = rule.default
        elif nt % WARP or nt > rule.hi:
            nt = rule.hi
        nt = max(nt, rule.lo)
        while nt > tuned - rule.extra and nt % 128 == 0:
            nt //= 2
        return max(nt + rule.extra, 3 * WARP)


def protocol_of(threads: int) -> str | None:
    """The protocol a launch of `threads` threads ran, where its count says by NCCL 2.28.9's rules (the launches
    of OBSERVED_LAUNCHES fit them): 640 is point-to-point (NCCL_MAX_NTHREADS; ring LL128's default too, which
    NCCL_NTHREADS does not set either); a power of two from 64 to 512 is ring LL (512, halved for small messages);
    one warp more than that is ring Simple (its sync warp). None where the count fits no rule (a user's
    NCCL_NTHREADS): the trace does not say."""
    if threads == NCCL_THREADS:
        return "P2P"
    for protocol, rule in THREAD_RULES.items():
        nt = threads - rule.extra
        if rule.lo <= nt <= rule.hi and nt & (nt - 1) == 0:
            return protocol
    return None


def _nthreads_note(nt: int) -> str | None:
    if nt <= 0:
        return "is not positive: NCCL uses each protocol's default"
    if nt % WARP:
        return f"is not a multiple of {WARP}: NCCL uses each protocol's maximum"
    hi, lo = max(r.hi for r in THREAD_RULES.values()), min(r.lo for r in THREAD_RULES.values())
    return f"is above {hi}: NCCL uses {hi}" if nt > hi else f"is below {lo}: NCCL uses {lo}" if nt < lo else None


def cluster_dim(cluster: int, grid: int) -> int:
    """The cluster a grid launches with (src/enqueue.cc): none (1) when the size is 0 or does not divide the grid."""
    return cluster if cluster > 1 and grid % cluster == 0 else 1


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
    import ctypes.util  # on use, as in gpu.cuda_driver

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
        raise RuntimeError(f"cuobjdump failed on {library}: {shorten(proc.stderr.decode(errors='replace'), 200)}")
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
    measured = ("NCCL 2.28.9 sm_90 as cuobjdump read it on an H200 (fallback; ccoverlap's "
                "bench/results/foundation-h200-2026-11-30.json)")
    source_code = "NCCL source (src/enqueue.cc, src/include/device.h); not read from the binary"
    sources = {"threads": source_code, "dynamic_smem": source_code,
               "cluster": f"NCCL's default cgaClusterSize (src/init.cc): {DEFAULT_CLUSTER} from sm_90 on, none before; "
                          "NCCL_CGA_CLUSTER_SIZE sets it",
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
        grid=ctas, cluster=DEFAULT_CLUSTER if _sm(arch) >= 90 else 1, name="nccl",
    )
    return NcclFootprint(fp, sources, library)
