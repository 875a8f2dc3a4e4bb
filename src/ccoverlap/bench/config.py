"""Bench configuration, validated before any process starts (importable without torch)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ccoverlap.bench.strategies import BY_NAME, STRATEGIES
from ccoverlap.errors import UsageError, check_range

WORKLOADS = ("micro", "ddp", "fsdp", "tp", "moe")
COMMS = ("nccl", "gloo", "emulate")
#: --busbw default: the all-reduce bus bandwidth measured for 256 MiB on 2 x H200 over NVLink
#: (bench/results/bench-x2-h200-2026-11-30-micro.json: 268-284 GB/s)
DEFAULT_BUSBW_GBPS = 280.0


@dataclass(frozen=True)
class ModelSize:
    layers: int
    d_model: int
    heads: int
    seq: int
    batch: int
    vocab: int
    experts_per_rank: int = 2


TINY = ModelSize(layers=2, d_model=64, heads=4, seq=32, batch=4, vocab=128)
FULL = ModelSize(layers=8, d_model=2048, heads=16, seq=1024, batch=8, vocab=32000)
MICRO_TINY = (1 << 12, 1 << 16)
MICRO_FULL = (1 << 20, 1 << 24, 1 << 26, 1 << 28)  # bytes of float32 all-reduced


@dataclass(frozen=True)
class BenchConfig:
    workloads: tuple[str, ...]
    strategies: tuple[str, ...] = tuple(s.name for s in STRATEGIES)
    device: str = "cpu"  # cpu (gloo) or cuda (nccl)
    nproc: int = 2
    steps: int = 10
    warmup: int = 3
    size: ModelSize = TINY
    micro_sizes: tuple[int, ...] = MICRO_TINY
    micro_gemm: int = 256  # n of the n x n GEMM chain beside each all-reduce (8192 on GPUs)
    seed: int = 0
    trace_dir: str | None = None
    comm: str = "gloo"  # nccl (GPUs), gloo (CPU) or emulate (one process, emulated ranks: bench/emulate.py)
    emulate_world: int = 8  # --comm emulate: ranks the one process stands in for
    busbw_gbps: float = DEFAULT_BUSBW_GBPS  # --comm emulate: bus bandwidth the proxies are paced to
    gpus: int = field(default=0, compare=False)  # visible GPUs, filled in by the CLI

    @property
    def backend(self) -> str:
        return {"emulate": "ccov_emulate"}.get(self.comm, self.comm)

    @property
    def world(self) -> int:
        """Ranks as the workloads see them (emulated ranks under --comm emulate)."""
        return self.emulate_world if self.comm == "emulate" else self.nproc

    def validate(self) -> BenchConfig:
        for flag, values, valid in (("--workload", self.workloads, WORKLOADS), ("--strategies", self.strategies, tuple(BY_NAME))):
            if not values or (bad := [v for v in values if v not in valid]):
                raise UsageError(f"{flag} {','.join(bad or values) or '(empty)'}: valid {', '.join(valid)}")
        if self.device not in ("cpu", "cuda"):
            raise UsageError(f"--device {self.device}: valid cpu (gloo) or cuda (nccl)")
        if self.comm not in COMMS:
            raise UsageError(f"--comm {self.comm}: valid nccl (GPUs), gloo (CPU) or emulate (one process)")
        if self.comm == "nccl" and self.device != "cuda":
            raise UsageError("--comm nccl needs GPUs: use --comm gloo (CPU ranks) or --comm emulate")
        if self.comm == "gloo" and self.device != "cpu":
            raise UsageError("--comm gloo runs on --device cpu; on GPUs use --comm nccl or --comm emulate")
        if self.comm == "emulate":
            if self.nproc != 1:
                raise UsageError(f"--comm emulate runs one process: --nproc {self.nproc} (valid 1)")
            if self.device == "cuda" and self.gpus < 1:
                raise UsageError("--comm emulate on --device cuda needs a GPU; 0 visible (--device cpu: a data-only dry run)")
            check_range("--emulate-world", self.emulate_world, 2, 4096)
            check_range("--busbw", self.busbw_gbps, 1, 100000)
        check_range("--nproc", self.nproc, 1, 1024)
        check_range("--steps", self.steps, 1, 100000)
        check_range("--warmup", self.warmup, 0, 100000)
        if self.comm == "nccl" and self.gpus < self.nproc:
            raise UsageError(f"--device cuda with --nproc {self.nproc} needs {self.nproc} GPUs; {self.gpus} visible "
                             "(NCCL needs one GPU per rank: use --device cpu for gloo)")
        s = self.size
        for name, value in vars(s).items():
            check_range(f"--{name.replace('_', '-')}", value, 1, 10**7)
        if s.d_model % s.heads:
            raise UsageError(f"--d-model {s.d_model} is not divisible by --heads {s.heads}")
        n = self.world
        if "tp" in self.workloads and (s.heads % n or (4 * s.d_model) % n):
            raise UsageError(f"tp: world size {n} must divide --heads {s.heads} and 4 x --d-model {4 * s.d_model}")
        if "moe" in self.workloads and (s.batch * s.seq) % n:
            raise UsageError(f"moe: world size {n} must divide the tokens per rank ({s.batch} x {s.seq})")
        if self.trace_dir is not None and not self.trace_dir:
            raise UsageError("--trace needs a directory")
        return self


def torch_available() -> None:
    """The ranks run torch.distributed; say so plainly where torch is missing."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise UsageError("ccoverlap bench needs PyTorch (pip install torch)") from None
