"""Bench configuration, validated before any process starts (importable without torch)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ccoverlap.control import levers
from ccoverlap.bench import comms
from ccoverlap.bench.catalog import BY_NAME as BY_WORKLOAD
from ccoverlap.bench.comms import COMMS, Comm
from ccoverlap.util.text import shorten
from ccoverlap.util.errors import UsageError, check_range

#: --busbw default: the all-reduce bus bandwidth measured for 256 MiB on 2 x H200 over NVLink
#: (bench/results/bench-x2-h200-2026-11-30-micro.json: 268-284 GB/s)
DEFAULT_BUSBW_GBPS = 280.0


def _size(what: str) -> dict:
    return {"help": f"model: {what}"}


@dataclass(frozen=True)
class ModelSize:
    layers: int = field(metadata=_size("decoder blocks"))
    d_model: int = field(metadata=_size("width"))
    heads: int = field(metadata=_size("attention heads"))
    seq: int = field(metadata=_size("tokens per sequence"))
    batch: int = field(metadata=_size("sequences per rank and step"))
    vocab: int = field(metadata=_size("vocabulary"))
    experts_per_rank: int = field(default=2, metadata=_size("experts per rank (moe)"))


TINY = ModelSize(layers=2, d_model=64, heads=4, seq=32, batch=4, vocab=128)
FULL = ModelSize(layers=8, d_model=2048, heads=16, seq=1024, batch=8, vocab=32000)
MICRO_TINY = (1 << 12, 1 << 16)
MICRO_FULL = (1 << 20, 1 << 24, 1 << 26, 1 << 28)  # bytes of float32 all-reduced


def _workloads(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(BY_WORKLOAD) if names == ("all",) else names


#: what `ccoverlap bench` runs without --strategies: the baseline, PyTorch's own overlap and the paper's two
#: levers, so that the default run (every workload, 3 process sets each) fits 8 minutes on one H200 (docs/bench.md)
DEFAULT_STRATEGIES = (levers.NO_OVERLAP, levers.DEFAULT, "priority", "priority+shape")
ALL = "all"  # --strategies all: the lever registry's list
REPEAT_MARK = "#"  # default#2: the second row of a strategy named twice


def _strategies(names: tuple[str, ...]) -> tuple[str, ...]:
    """Each --strategies item (no-overlap, default or lever[=value]+...) as the lever registry names it
    (nccl-ctas=4+nccl-threads=256 -> nccl-ctas+nccl-threads), `all` the registry's list; a strategy named again
    is a row of its own, named apart (default, default#2: the A/A check); UsageError naming a bad one."""
    out = []
    for name in (s.name for s in levers.STRATEGIES) if names == (ALL,) else names:
        try:
            canonical = levers.strategy(strategy_of(name)).name
        except UsageError as exc:
            raise UsageError(f"--strategies {shorten(name, 40)}: {exc} (a strategy is no-overlap, default or "
                             f"lever[=value]+...: ccoverlap levers; or {ALL})") from None
        seen = sum(strategy_of(o) == canonical for o in out)
        label = f"{canonical}{REPEAT_MARK}{seen + 1}" if seen else canonical
        if REPEAT_MARK in name and label != name:  # only as this function numbers a strategy named again
            raise UsageError(f"--strategies {shorten(name, 40)}: '{REPEAT_MARK}' is not part of a strategy; "
                             "name one twice to run "
                             f"it twice ({canonical},{canonical} gives {canonical} and {canonical}{REPEAT_MARK}2)")
        out.append(label)
    return tuple(out)


def strategy_of(label: str) -> str:
    """The strategy a row label runs (default#2 -> default)."""
    return label.partition(REPEAT_MARK)[0]


def _byte_counts(items: tuple[str, ...]) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in items)
    except ValueError:
        raise UsageError(f"--micro-sizes {','.join(items)}: whole numbers of bytes, comma-separated") from None


@dataclass(frozen=True)
class BenchConfig:
    """What `ccoverlap bench` runs. The defaults are the CLI's; a field with help is a CLI option
    (util/options.py). `auto` and None are settled by resolved(), on what is visible."""

    workloads: tuple[str, ...] = field(default=tuple(BY_WORKLOAD), metadata={
        "flag": "--workload", "help": "comma-separated, or all", "parse": _workloads, "shown": "all"})
    strategies: tuple[str, ...] = field(default=DEFAULT_STRATEGIES, metadata={
        "help": "comma-separated strategies: no-overlap, default, or combinations of levers lever[=value]+... "
        f"(ccoverlap levers), or {ALL} (the registry's list); one named twice is run twice, the second row named "
        f"apart (default,default: default{REPEAT_MARK}2, an A/A check)",
        "parse": _strategies})
    repeats: int = field(default=3, metadata={
        "help": "fresh process sets per strategy, run interleaved (A B C A B C ...); the verdict against default "
        "resamples them first, so the noise between processes is in its interval (1: step-to-step noise only)"})
    device: str = field(default="auto", metadata={
        "help": "cpu, cuda or auto", "shown": "auto: cuda if GPUs are visible"})
    nproc: int | None = field(default=None, metadata={
        "help": "ranks", "type": int, "shown": "the GPUs, or 2 on the CPU; 1 with --comm emulate"})
    comm: str = field(default="auto", metadata={
        "help": "nccl, gloo, emulate or auto", "shown": "auto: nccl with >= 2 GPUs, emulate with one, gloo on the CPU"})
    emulate_world: int = field(default=8, metadata={"help": "--comm emulate: ranks emulated"})
    busbw_gbps: float = field(default=DEFAULT_BUSBW_GBPS, metadata={
        "flag": "--busbw", "help": "--comm emulate: bus bandwidth in GB/s the proxies are paced to; the default is "
        "the all-reduce busbw measured on 2 x H200 NVLink"})
    # a process set's start (torch, CUDA, the workloads' first steps) outweighs its timed steps: 8 steps in each of 3
    # sets weigh the noise between processes, and keep the default run within 8 minutes on one H200 (docs/bench.md)
    steps: int = field(default=8, metadata={"help": "timed steps per rank and process set"})
    warmup: int = field(default=2, metadata={"help": "untimed steps first"})
    size: ModelSize = FULL
    micro_sizes: tuple[int, ...] = field(default=MICRO_FULL, metadata={
        "help": "bytes all-reduced by micro, comma-separated", "parse": _byte_counts})
    micro_gemm: int = 8192  # n of the n x n GEMM chain beside each all-reduce
    seed: int = 0
    trace_dir: str | None = field(default=None, metadata={
        "flag": "--trace", "metavar": "DIR", "help": "write a torch.profiler trace per strategy and rank: "
        "DIR/<workload>/<strategy>/rank<r>_trace.json.gz, which `ccoverlap analyze DIR/<workload>` reads"})
    gpus: int = field(default=0, compare=False)  # visible GPUs, set by resolved()

    @property
    def comm_backend(self) -> Comm:
        return COMMS[self.comm]

    @property
    def backend(self) -> str:
        return self.comm_backend.backend

    @property
    def world(self) -> int:
        """Ranks as the workloads see them (emulated ranks under --comm emulate)."""
        return self.comm_backend.world(self)

    @property
    def untraced(self) -> tuple[str, ...]:
        """The selected workloads --trace cannot record."""
        return tuple(w for w in self.workloads if w in BY_WORKLOAD and not BY_WORKLOAD[w].traced)

    def resolved(self, gpus: int) -> BenchConfig:
        """`auto` device and comm and the default rank count, for `gpus` visible GPUs."""
        device = auto_device(self.device, gpus)
        comm = self.comm if self.comm != "auto" else comms.auto(device, self.nproc, gpus)
        nproc = self.nproc if self.nproc is not None else COMMS[comm].default_nproc(gpus) if comm in COMMS else 1
        return replace(self, device=device, comm=comm, nproc=nproc, gpus=gpus)

    def validate(self) -> BenchConfig:
        """This config, its strategies named as --strategies names them (default,default: default#2), or a
        UsageError naming the first bad value."""
        bad = [v for v in self.workloads if v not in BY_WORKLOAD]
        if not self.workloads or not all(self.workloads) or bad:
            raise UsageError(f"--workload {','.join(bad or self.workloads) or '(empty)'}: "
                             f"valid {', '.join(BY_WORKLOAD)}")
        if not self.strategies:
            raise UsageError("--strategies (empty): name at least one (no-overlap, default, or lever[=value]+...)")
        if self.device not in ("cpu", "cuda"):
            raise UsageError(f"--device {self.device}: valid cpu (gloo) or cuda (nccl)")
        if self.comm not in COMMS:
            raise UsageError(f"--comm {self.comm}: valid {comms.valid()}")
        check_range("--nproc", self.nproc, 1, 1024)
        self.comm_backend.validate(self)
        check_range("--repeats", self.repeats, 1, 1000)
        check_range("--steps", self.steps, 1, 100000)
        check_range("--warmup", self.warmup, 0, 100000)
        check_range("--busbw", self.busbw_gbps, 1, 100000, "GB/s")  # NaN too: never written into --json
        if not self.micro_sizes:
            raise UsageError("--micro-sizes (empty): give at least one size in bytes")
        for size in self.micro_sizes:
            check_range("--micro-sizes", size, 4, 1 << 40, "bytes (float32 all-reduced)")
        check_range("--emulate-world", self.emulate_world, 2, 4096)
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
        if self.trace_dir and len(self.untraced) == len(self.workloads):
            traced = ", ".join(w.name for w in BY_WORKLOAD.values() if w.traced)
            raise UsageError(f"--trace: {', '.join(self.untraced)} has no training step to trace; "
                             f"select one of {traced}")
        return replace(self, strategies=_strategies(self.strategies))


def auto_device(device: str, gpus: int) -> str:
    """--device auto: cuda where GPUs are visible."""
    return device if device != "auto" else ("cuda" if gpus else "cpu")


#: named overrides of the defaults (options given on the command line win over them)
TINY_PRESET = {"size": TINY, "micro_sizes": MICRO_TINY, "micro_gemm": 256}
PRESETS = {"--tiny": TINY_PRESET, "on the CPU": TINY_PRESET | {"steps": 3, "warmup": 1}}


def torch_available() -> None:
    """The ranks run torch.distributed; say so plainly where torch is missing."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise UsageError("ccoverlap bench needs PyTorch (pip install torch)") from None
