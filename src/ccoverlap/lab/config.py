"""Lab configuration: validated before any GPU work starts (and importable without torch)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ccoverlap.control import levers
from ccoverlap.util.errors import UsageError, check_range

FAMILIES = ("fma", "elementwise", "gemm", "attention", "transformer", "sparse")
LIBRARY_FAMILIES = ("gemm", "attention", "transformer")  # torch's kernels: shaped through the interposer
#: comm proxies: "nccl" has the installed NCCL's footprint (ccoverlap.model.nccl), "nccl-allreduce" the
#: AllReduce NCCL 2.28.9 launched on 2 x H200 (nccl.OBSERVED_LAUNCHES), "light" a small kernel
PROXIES = ("nccl", "nccl-allreduce", "light")
ORDERS = ("before", "with", "delayed")  # comm launched before compute, right after it, or delayed into it


@dataclass(frozen=True)
class LabConfig:
    """What `ccoverlap lab` measures. The defaults are the CLI's; a field with help is a CLI option
    (util/options.py), the others are fixed sizes of the compute families."""

    computes: tuple[str, ...] = field(default=FAMILIES, metadata={
        "flag": "--compute", "help": "families, comma-separated"})
    comms: tuple[str, ...] = field(default=("nccl", "light"), metadata={
        "flag": "--comm", "help": f"proxies, comma-separated: {', '.join(PROXIES)}"})
    strategies: tuple[str, ...] = field(default=tuple(s.name for s in levers.STRATEGIES), metadata={
        "help": "lever combinations (ccoverlap levers), comma-separated", "shown": "every registry strategy"})
    orders: tuple[str, ...] = field(default=ORDERS, metadata={"help": "launch orders"})
    reps: int = field(default=20, metadata={"help": "timed repetitions per cell, >= 10"})
    warmup: int = field(default=3, metadata={"help": "untimed repetitions first"})
    comm_ctas: int = field(default=16, metadata={"help": "CTAs of the nccl proxy (light uses twice as many)"})
    comm_mib: int = field(default=1024, metadata={"help": "MiB per comm buffer"})
    comm_busbw: float = field(default=0.0, metadata={
        "help": "GB/s the proxies are paced to, as the emulation's (0: as fast as they go)"})
    delay_ms: float = field(default=1.0, metadata={"help": "delay of the 'delayed' order"})
    fma_regs: int = field(default=16, metadata={"help": "register cap of the fma kernel"})
    fma_iters: int = field(default=40000, metadata={"help": "FMA loop trips per thread"})
    sparse_ms: float = field(default=4.0, metadata={"help": "how long the sparse family (one FMA block per SM) runs"})
    trace_dir: str | None = field(default=None, metadata={
        "flag": "--trace", "metavar": "DIR", "help": "also record each cell (1 warm-up and 2 recorded repetitions, "
        "the first analysed) as "
        "DIR/<compute>+<comm>/<strategy>-<order>/rank0_trace.json.gz, for `ccoverlap analyze --comm-regex "
        "'^comm_(proxy|paced)$'`"})
    elementwise_gib: float = 2.0
    elementwise_launches: int = 3
    gemm_n: int = 8192
    gemm_count: int = 2
    attention_shape: tuple[int, int, int, int] = (8, 32, 4096, 128)  # batch, heads, seq, head dim
    transformer_shape: tuple[int, int, int, int] = (4, 2048, 2048, 16)  # batch, seq, model dim, heads

    def validate(self) -> LabConfig:
        for flag, values, valid in (
            ("--compute", self.computes, FAMILIES), ("--comm", self.comms, PROXIES),
            ("--orders", self.orders, ORDERS),
        ):
            if not values or any(v not in valid for v in values):
                raise UsageError(f"{flag} {','.join(values) or '(empty)'}: valid {', '.join(valid)}")
        check_range("--reps", self.reps, 10, 10000)
        check_range("--warmup", self.warmup, 1, 1000)
        check_range("--comm-ctas", self.comm_ctas, 1, 1024)
        check_range("--comm-mib", self.comm_mib, 1, 16384, "MiB")
        for name in self.strategies:
            levers.strategy(name)  # a UsageError names a bad lever or value
        if not self.strategies:
            raise UsageError("--strategies (empty): give at least one, e.g. default,priority")
        if not 0 <= self.comm_busbw <= 10000:
            raise UsageError(f"--comm-busbw={self.comm_busbw} is out of range: valid 0 (unpaced)..10000 GB/s")
        if not 0.1 <= self.sparse_ms <= 1000:
            raise UsageError(f"--sparse-ms={self.sparse_ms} is out of range: valid 0.1..1000")
        check_range("--fma-regs", self.fma_regs, 16, 255)
        check_range("--fma-iters", self.fma_iters, 1, 10**7)
        if not 0 <= self.delay_ms <= 1000:
            raise UsageError(f"--delay-ms={self.delay_ms} is out of range: valid 0..1000")
        return self


#: `ccoverlap lab --quick`: all families against the nccl proxy, launched with the compute
QUICK = {"comms": ("nccl",), "orders": ("with",), "reps": 10, "warmup": 2}

#: `ccoverlap lab --case NAME`: the cases of docs/lab.md "Levers" (comm launched right after compute).
CASES: dict[str, dict] = {
    # a low-occupancy kernel without shared memory beside NCCL's AllReduce footprint: only the SM's
    # shared-memory configuration can keep the comm CTA out
    "carveout": {"computes": ("sparse",), "comms": ("nccl-allreduce",), "orders": ("with",), "strategies": (
        "no-overlap", "default", "priority", "carveout-hint", "carveout-hint+priority", "carveout-hint=58",
        "carveout-hint=60+priority",
        "shape", "priority+shape", "nccl-cluster", "nccl-threads+priority")},
    # FMA confined to a green context that leaves the comm CTAs SMs, with NCCL's clusters of 4 and of 1
    "green-cluster": {"computes": ("fma",), "comms": ("nccl",), "orders": ("with",), "strategies": (
        "no-overlap", "default", "priority", "nccl-cluster", "priority+nccl-cluster", "green", "green+nccl-cluster",
        "green+priority", "green+priority+nccl-cluster", "priority+shape")},
    # cuBLAS bf16 GEMMs (Hopper's persistent kernels) and an all-reduce paced like NCCL on NVLink
    "persistent-gemm": {"computes": ("gemm",), "comms": ("nccl-allreduce",), "orders": ("with",), "comm_busbw": 280.0,
                        "strategies": (
        "no-overlap", "default", "priority", "sm-carveout+priority", "green", "green+priority",
        "green+priority+nccl-cluster", "green=32+priority+nccl-cluster", "green=40+priority+nccl-cluster",
        "priority+nccl-cluster", "shape", "priority+shape", "nccl-ctas=8+priority", "nccl-threads+priority")},
}


def cells(cfg: LabConfig) -> int:
    """Strategy-order cells the run will measure, for the progress bar."""
    per_case = sum(1 if levers.strategy(s).no_overlap else len(cfg.orders) for s in cfg.strategies)
    return per_case * len(cfg.computes) * len(cfg.comms)


def needs_interposer(cfg: LabConfig) -> bool:
    """Library kernels are to be shaped: the lab must run with the launch interposer preloaded."""
    return any(c in LIBRARY_FAMILIES for c in cfg.computes) and any(
        "shape" in levers.strategy(s).values for s in cfg.strategies)
