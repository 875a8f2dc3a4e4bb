"""The communication backends of `ccoverlap bench --comm`, one object each: what differs between
nccl, gloo and emulate (the device it needs, the world the workloads see, how a rank joins, what
the results must say, which kernels are communication, what input is valid) lives here and
nowhere else. Importable without torch: a rank imports it when it joins."""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from ccoverlap.model import nccl
from ccoverlap.util.errors import UsageError

if TYPE_CHECKING:
    from ccoverlap.control.levers import Strategy


class BenchConfig(Protocol):
    """What a backend reads of a bench run's configuration (bench/config.py's BenchConfig, which imports this
    module: the backends depend on these fields, not on that class)."""

    device: str
    nproc: int
    gpus: int
    emulate_world: int
    busbw_gbps: float


class Comm:
    name: str
    backend: str  # torch.distributed's name for it, as provenance records it
    device: str  # the --device it runs on ("": either)
    wrong_device: str  # the one line for any other --device
    summary: str  # a few words for --help and error messages
    emulated = False  # one process stands in for rank 0 of --emulate-world ranks (bench/emulate.py)
    hard_exit = False  # leave the rank with os._exit once its results are written
    #: levers (`lever` or `lever=VALUE`) that have no effect through this backend on the bench's workloads,
    #: and why: their strategies are listed as n/a rather than run as if they did something
    not_honoured: Mapping[str, str] = {}

    def not_applicable(self, strategy: Strategy) -> str | None:
        """The first lever of `strategy` this backend cannot honour, as `lever: reason`, or None."""
        for name, value in strategy.levers:
            if reason := self.not_honoured.get(f"{name}={value}", self.not_honoured.get(name)):
                return f"{name}: {reason}"
        return None

    def world(self, cfg: BenchConfig) -> int:
        """Ranks as the workloads see them."""
        return cfg.nproc

    def default_nproc(self, gpus: int) -> int:
        return 2

    def validate(self, cfg: BenchConfig) -> None:
        if cfg.device != self.device:
            raise UsageError(self.wrong_device)

    def note(self, cfg: BenchConfig) -> str | None:
        """What to say before the run, if anything."""
        return None

    def init(self, cfg: BenchConfig):
        """Join the job in a rank: (device, rank, world size as the workloads see it)."""
        import torch
        import torch.distributed as dist

        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if self.device == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
            torch.cuda.set_device(device)
            dist.init_process_group(self.backend, device_id=device)
        else:
            device = torch.device("cpu")
            dist.init_process_group(self.backend)
        return device, rank, world

    def describe(self) -> dict | None:
        """What every row must say about the communication, after the rank ran (None: nothing)."""
        return None


class Nccl(Comm):
    name = backend = "nccl"
    device = "cuda"
    wrong_device = "--comm nccl needs GPUs: use --comm gloo (CPU ranks) or --comm emulate"
    summary = "GPUs"
    # EFFICIENCY runs (measured: NCCL is expected to change nothing here, nccl.CTA_POLICY_REACH says why)
    not_honoured = {"nccl-cta-policy=ZERO": nccl.CTA_POLICY_REACH["ZERO"]}

    def default_nproc(self, gpus: int) -> int:
        return gpus or 2

    def validate(self, cfg: BenchConfig) -> None:
        super().validate(cfg)
        if cfg.gpus < cfg.nproc:
            raise UsageError(f"--device cuda with --nproc {cfg.nproc} needs {cfg.nproc} GPUs; {cfg.gpus} visible "
                             "(NCCL needs one GPU per rank: use --device cpu for gloo)")

    def note(self, cfg: BenchConfig) -> str | None:
        return "note: one rank: NCCL collectives of a single rank move no data between GPUs" if cfg.nproc == 1 else None


class Gloo(Comm):
    name = backend = "gloo"
    device = "cpu"
    wrong_device = "--comm gloo runs on --device cpu; on GPUs use --comm nccl or --comm emulate"
    summary = "CPU"
    # gloo's threads can abort the interpreter's exit ("terminate called without an active
    # exception") after the work is done and written
    hard_exit = True


class Emulate(Comm):
    name = "emulate"
    backend = "ccov_emulate"
    device = ""
    summary = "one process"
    emulated = True  # its proxy kernel, comm_paced, is communication as NCCL's kernels are (model/comm.py)
    # NCCL changes nothing for these workloads under either policy: emulating that would be running `default`
    not_honoured = {f"nccl-cta-policy={name}": reason for name, reason in nccl.CTA_POLICY_REACH.items()}

    def world(self, cfg: BenchConfig) -> int:
        return cfg.emulate_world

    def default_nproc(self, gpus: int) -> int:
        return 1

    def validate(self, cfg: BenchConfig) -> None:
        if cfg.nproc != 1:
            raise UsageError(f"--comm emulate runs one process: --nproc {cfg.nproc} (valid 1)")
        if cfg.device == "cuda" and cfg.gpus < 1:
            raise UsageError("--comm emulate on --device cuda needs a GPU; 0 visible "
                             "(--device cpu: a data-only dry run)")
        nccl.Knobs.from_env(os.environ)  # NCCL's variables as the proxies will read them: no number is bad input

    def note(self, cfg: BenchConfig) -> str | None:
        return (f"EMULATION: one process stands in for rank 0 of {cfg.emulate_world}; each collective is a "
                f"proxy kernel paced to {cfg.busbw_gbps:g} GB/s bus bandwidth"
                + ("" if cfg.device == "cuda" else " (CPU: data only, no proxy)"))

    def init(self, cfg: BenchConfig):
        import torch

        from ccoverlap.bench import emulate  # on use: it imports torch, and a rank imports this module without it

        emulation = emulate.Emulation.from_env(cfg.emulate_world, cfg.busbw_gbps)
        if cfg.device == "cuda":
            from ccoverlap.bench.proxy import ProxyMover  # on use: torch and the CUDA driver

            device = torch.device("cuda", 0)
            torch.cuda.set_device(device)
            emulate.init(ProxyMover(emulation, device), self.backend)
        else:
            device = torch.device("cpu")
            emulate.init(emulate.CpuMover(emulation), self.backend)
        return device, 0, cfg.emulate_world

    def describe(self) -> dict | None:
        from ccoverlap.bench import emulate  # on use: torch

        return emulate.describe()


COMMS: dict[str, Comm] = {c.name: c for c in (Nccl(), Gloo(), Emulate())}


def auto(device: str, nproc: int | None, gpus: int) -> str:
    """--comm auto: gloo on the CPU, emulate with one GPU (or one rank), else nccl."""
    if device == "cpu":
        return "gloo"
    return "emulate" if nproc == 1 or (nproc is None and gpus == 1) else "nccl"


def valid() -> str:
    """'nccl (GPUs), gloo (CPU) or emulate (one process)'."""
    *first, last = (f"{c.name} ({c.summary})" for c in COMMS.values())
    return f"{', '.join(first)} or {last}"
