"""Bench configuration, validated before any process starts (importable without torch)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ccoverlap.bench.strategies import BY_NAME, STRATEGIES
from ccoverlap.errors import UsageError, check_range

WORKLOADS = ("micro", "ddp", "fsdp", "tp", "moe")


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
    gpus: int = field(default=0, compare=False)  # visible GPUs, filled in by the CLI

    @property
    def backend(self) -> str:
        return "nccl" if self.device == "cuda" else "gloo"

    def validate(self) -> BenchConfig:
        for flag, values, valid in (("--workload", self.workloads, WORKLOADS), ("--strategies", self.strategies, tuple(BY_NAME))):
            if not values or (bad := [v for v in values if v not in valid]):
                raise UsageError(f"{flag} {','.join(bad or values) or '(empty)'}: valid {', '.join(valid)}")
        if self.device not in ("cpu", "cuda"):
            raise UsageError(f"--device {self.device}: valid cpu (gloo) or cuda (nccl)")
        check_range("--nproc", self.nproc, 1, 1024)
        check_range("--steps", self.steps, 1, 100000)
        check_range("--warmup", self.warmup, 0, 100000)
        if self.device == "cuda" and self.gpus < self.nproc:
            raise UsageError(f"--device cuda with --nproc {self.nproc} needs {self.nproc} GPUs; {self.gpus} visible "
                             "(NCCL needs one GPU per rank: use --device cpu for gloo)")
        s = self.size
        for name, value in vars(s).items():
            check_range(f"--{name.replace('_', '-')}", value, 1, 10**7)
        if s.d_model % s.heads:
            raise UsageError(f"--d-model {s.d_model} is not divisible by --heads {s.heads}")
        if "tp" in self.workloads and (s.heads % self.nproc or (4 * s.d_model) % self.nproc):
            raise UsageError(f"tp: world size {self.nproc} must divide --heads {s.heads} and 4 x --d-model {4 * s.d_model}")
        if "moe" in self.workloads and (s.batch * s.seq) % self.nproc:
            raise UsageError(f"moe: world size {self.nproc} must divide the tokens per rank ({s.batch} x {s.seq})")
        if self.trace_dir is not None and not self.trace_dir:
            raise UsageError("--trace needs a directory")
        return self


def torch_available() -> None:
    """The ranks run torch.distributed; say so plainly where torch is missing."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise UsageError("ccoverlap bench needs PyTorch (pip install torch)") from None
