"""Lab configuration: validated before any GPU work starts (and importable without torch)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ccoverlap.errors import UsageError, check_range
from ccoverlap.lab.strategies import BY_NAME, ORDERS, STRATEGIES

FAMILIES = ("fma", "elementwise", "gemm", "attention", "transformer")
LIBRARY_FAMILIES = ("gemm", "attention", "transformer")  # torch's kernels: shaped through the interposer
PROXIES = ("nccl", "light")


@dataclass(frozen=True)
class LabConfig:
    """What `ccoverlap lab` measures. The defaults are the CLI's; a field with help is a CLI option
    (cli/_config.py), the others are fixed sizes of the compute families."""

    computes: tuple[str, ...] = field(default=FAMILIES, metadata={"flag": "--compute", "help": "families, comma-separated"})
    comms: tuple[str, ...] = field(default=PROXIES, metadata={"flag": "--comm", "help": "proxies: nccl, light"})
    strategies: tuple[str, ...] = field(default=tuple(s.name for s in STRATEGIES), metadata={
        "help": "subset of the strategies", "shown": "all"})
    orders: tuple[str, ...] = field(default=ORDERS, metadata={"help": "launch orders"})
    reps: int = field(default=20, metadata={"help": "timed repetitions per cell, >= 10"})
    warmup: int = field(default=3, metadata={"help": "untimed repetitions first"})
    comm_ctas: int = field(default=16, metadata={"help": "NCCL proxy CTAs (light uses twice as many)"})
    comm_mib: int = field(default=1024, metadata={"help": "MiB per comm buffer"})
    # NCCL_NTHREADS=256 plus NCCL's extra warp
    shrink_threads: int = field(default=288, metadata={"help": "comm threads for shrink+shape+priority"})
    delay_ms: float = field(default=1.0, metadata={"help": "delay of the 'delayed' order"})
    fma_regs: int = field(default=16, metadata={"help": "register cap of the fma kernel"})
    fma_iters: int = field(default=40000, metadata={"help": "FMA loop trips per thread"})
    elementwise_gib: float = 2.0
    elementwise_launches: int = 3
    gemm_n: int = 8192
    gemm_count: int = 2
    attention_shape: tuple[int, int, int, int] = (8, 32, 4096, 128)  # batch, heads, seq, head dim
    transformer_shape: tuple[int, int, int, int] = (4, 2048, 2048, 16)  # batch, seq, model dim, heads

    def validate(self) -> LabConfig:
        for flag, values, valid in (
            ("--compute", self.computes, FAMILIES), ("--comm", self.comms, PROXIES),
            ("--strategies", self.strategies, tuple(BY_NAME)), ("--orders", self.orders, ORDERS),
        ):
            if not values or any(v not in valid for v in values):
                raise UsageError(f"{flag} {','.join(values) or '(empty)'}: valid {', '.join(valid)}")
        check_range("--reps", self.reps, 10, 10000)
        check_range("--warmup", self.warmup, 1, 1000)
        check_range("--comm-ctas", self.comm_ctas, 1, 1024)
        check_range("--comm-mib", self.comm_mib, 1, 16384, "MiB")
        check_range("--shrink-threads", self.shrink_threads, 64, 1024)
        check_range("--fma-regs", self.fma_regs, 16, 255)
        check_range("--fma-iters", self.fma_iters, 1, 10**7)
        if not 0 <= self.delay_ms <= 1000:
            raise UsageError(f"--delay-ms={self.delay_ms} is out of range: valid 0..1000")
        return self


#: `ccoverlap lab --quick`: all families against the nccl proxy, launched with the compute
QUICK = {"comms": ("nccl",), "orders": ("with",), "reps": 10, "warmup": 2}


def cells(cfg: LabConfig) -> int:
    """Strategy-order cells the run will measure, for the progress bar."""
    per_case = sum(len(cfg.orders) if BY_NAME[s].concurrent else 1 for s in cfg.strategies)
    return per_case * len(cfg.computes) * len(cfg.comms)


def needs_interposer(cfg: LabConfig) -> bool:
    """Library kernels are to be shaped: the lab must run with the launch interposer preloaded."""
    return any(c in LIBRARY_FAMILIES for c in cfg.computes) and any(BY_NAME[s].shape for s in cfg.strategies)
