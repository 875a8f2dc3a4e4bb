"""What each bench strategy changes. Env-level controls need fresh processes, so each strategy
is a set of environment variables (plus in-process settings the worker applies)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BenchStrategy:
    name: str
    env: dict[str, str] = field(default_factory=dict)
    shape: bool = False  # preload the interposer in auto mode
    carveout: bool = False  # torch._C._set_sm_carveout_experimental in each worker
    no_overlap: bool = False  # wait for each collective before the next compute
    cuda_only: bool = True
    description: str = ""


# TORCH_NCCL_HIGH_PRIORITY=1 puts every NCCL process group on high-priority streams, including
# the groups FSDP and DTensor create themselves (ProcessGroupNCCL.Options(is_high_priority_stream)).
_PRIORITY = {"TORCH_NCCL_HIGH_PRIORITY": "1"}

STRATEGIES: tuple[BenchStrategy, ...] = (
    BenchStrategy("no-overlap", no_overlap=True, cuda_only=False, description="wait for each collective before computing on"),
    BenchStrategy("default", cuda_only=False, description="torch's own overlap, default priority"),
    BenchStrategy("priority", env=_PRIORITY, description="every NCCL group on high-priority streams"),
    BenchStrategy("shape", shape=True, description="interposer, auto policy (pad planned against the first NCCL kernel)"),
    BenchStrategy("priority+shape", env=_PRIORITY, shape=True, description="the paper: both"),
    BenchStrategy("carveout", env=_PRIORITY, carveout=True, description="cuBLAS leaves SMs for NCCL, plus priority"),
    BenchStrategy("nccl-ctas", env={"NCCL_MAX_CTAS": "4", "NCCL_NTHREADS": "256"}, description="fewer, smaller NCCL CTAs"),
    BenchStrategy("max-connections-1", env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, description="one hardware queue: launch order decides"),
)
BY_NAME = {s.name: s for s in STRATEGIES}

#: Never let NVLink multicast run on shared machines (device docs).
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
