"""One GPU standing in for one rank of an N-rank job (`ccoverlap bench --comm emulate`).

This is an **emulation**. One process joins a process group that says it has N ranks, so DDP,
FSDP2, tensor parallelism and the MoE layer shard and launch exactly what rank 0 of an N-rank job
would. Each collective is replaced by a communication proxy kernel with NCCL's CTA footprint
(threads, registers, static and dynamic shared memory) that moves the bytes a ring collective
moves per rank, paced to a bus bandwidth: the proxy's CTAs stay resident for as long as the real
collective would, so compute and communication contend for SMs as they would with NCCL. What it
cannot show: other ranks' skew, NVLink itself, NCCL's protocol choices.

Data: every other rank is taken to hold what this one holds, and to add zeros. All-reduce and
broadcast leave the tensor as it is, all-gather tiles this rank's shard, reduce-scatter keeps
this rank's chunk, all-to-all returns what it sent. Results are deterministic, so every strategy
must reproduce the baseline's losses, as with real collectives.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from ccoverlap.errors import check_range


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


def ring_bytes(kind: str, nbytes: int, world: int) -> int:
    """Bytes a ring collective moves through each rank; `nbytes` is its largest buffer (the full
    all-gather output, the full reduce-scatter input)."""
    return int(nbytes * RING_FACTORS[kind](world))


@dataclass(frozen=True)
class Emulation:
    """What the proxies stand for: N ranks linked at `busbw_gbps`, NCCL's CTA shape, its stream."""

    world: int = 8
    busbw_gbps: float = 280.0
    ctas: int = 16
    threads: int = 640
    high_priority: bool = False

    def validate(self) -> Emulation:
        check_range("--emulate-world", self.world, 2, 4096)
        check_range("--busbw", self.busbw_gbps, 1, 100000)
        check_range("NCCL_MAX_CTAS", self.ctas, 1, 64)
        check_range("NCCL_NTHREADS", self.threads, 64, 1024)
        return self

    @classmethod
    def from_env(cls, world: int, busbw_gbps: float, env=os.environ) -> Emulation:
        """The NCCL and torch variables a strategy sets apply to the proxies as they would to NCCL."""
        return cls(world, busbw_gbps,
                   ctas=min(cls.ctas, int(env.get("NCCL_MAX_CTAS", cls.ctas))),
                   threads=int(env.get("NCCL_NTHREADS", cls.threads)),
                   high_priority=env.get("TORCH_NCCL_HIGH_PRIORITY", "0") == "1").validate()

    def duration_ns(self, nbytes: int) -> int:
        return int(nbytes / self.busbw_gbps)  # bytes / (GB/s) = ns


class Mover(Protocol):
    """What carries out the emulated collectives: CpuMover here, ProxyMover (bench/proxy.py) on a GPU."""

    emulation: Emulation

    def move(self, src: torch.Tensor, dst: torch.Tensor, nbytes: int) -> None: ...

    def done(self, outputs: list[torch.Tensor]) -> torch.futures.Future: ...


class CpuMover:
    """The data part only, with torch copies: for the orchestration on machines without a GPU."""

    def __init__(self, emulation: Emulation):
        self.emulation = emulation
        self.moved_bytes = 0

    def move(self, src: torch.Tensor, dst: torch.Tensor, nbytes: int) -> None:
        tile(src, dst)
        self.moved_bytes += nbytes

    def done(self, outputs: list[torch.Tensor]) -> torch.futures.Future:
        fut = torch.futures.Future()
        fut.set_result(outputs)
        return fut


def tile(src: torch.Tensor, dst: torch.Tensor) -> None:
    """dst's bytes = src's bytes, repeated or truncated: the emulated data semantics."""
    if src.data_ptr() == dst.data_ptr() and src.nbytes == dst.nbytes:
        return
    s, d = _bytes(src), _bytes(dst)
    if d.numel() <= s.numel():
        d.copy_(s[: d.numel()])
    else:
        d.view(-1, s.numel()).copy_(s.expand(d.numel() // s.numel(), -1))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).view(torch.uint8)


class EmulatedGroup(dist.ProcessGroup):
    """A process group of `world` ranks of which this process is rank 0 (see the module docstring)."""

    def __init__(self, rank: int, world: int, mover: Mover, backend: str):
        super().__init__(rank, world)
        self.mover, self.backend = mover, backend
        self.calls: dict[str, int] = {}

    def getBackendName(self) -> str:
        return self.backend

    @property
    def group_name(self) -> str:  # DeviceMesh and functional collectives find groups by name
        return dist.distributed_c10d._world.pg_names[self]

    @property
    def pg_name(self) -> str:
        return self.group_name

    def _run(self, kind: str, pairs: list[tuple[torch.Tensor, torch.Tensor]], nbytes: int | None = None):
        self.calls[kind] = self.calls.get(kind, 0) + 1
        for src, dst in pairs:
            size = max(src.nbytes, dst.nbytes) if nbytes is None else nbytes
            self.mover.move(src, dst, ring_bytes(kind, size, self.size()))
        # the future's value is the outputs, as NCCL's is: DDP's reducer reads it
        return _create_work_from_future(self.mover.done([dst for _, dst in pairs]))

    # --- collectives, as the C++ ProcessGroup trampoline names them ------------------------------
    def allreduce(self, tensors, opts=None):
        return self._run("allreduce", [(t, t) for t in tensors])

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors)

    def broadcast(self, tensors, opts=None):
        return self._run("broadcast", [(t, t) for t in tensors])

    def allgather(self, outputs, inputs, opts=None):
        # a list of chunks per input: each chunk receives this rank's input
        return self._run("allgather", [(i, o) for outs, i in zip(outputs, inputs) for o in outs],
                         nbytes=sum(o.nbytes for o in outputs[0]))

    def all_gather_single(self, output, input, opts=None):
        return self._run("allgather", [(input, output)])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._run("allgather", list(zip(inputs, outputs)))

    def reduce_scatter(self, outputs, inputs, opts=None):
        return self._run("reduce_scatter", [(chunks[0], o) for o, chunks in zip(outputs, inputs)],
                         nbytes=sum(c.nbytes for c in inputs[0]))

    def reduce_scatter_single(self, output, input, opts=None):
        return self._run("reduce_scatter", [(input, output)])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._run("reduce_scatter", list(zip(inputs, outputs)))

    def all_to_all_single(self, output, input, output_splits, input_splits, opts=None):
        return self._run("alltoall", [(input, output)])

    def scatter(self, outputs, inputs, opts=None):  # this rank is the root and keeps chunk 0
        return self._run("scatter", [(inputs[0][0], outputs[0])], nbytes=sum(c.nbytes for c in inputs[0]))

    def gather(self, outputs, inputs, opts=None):
        return self._run("gather", [(inputs[0], o) for o in outputs[0]], nbytes=sum(o.nbytes for o in outputs[0]))

    # older torch (2.11) calls the single-tensor collectives by these names
    _allgather_base = all_gather_single
    _reduce_scatter_base = reduce_scatter_single
    alltoall_base = all_to_all_single
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def alltoall(self, outputs, inputs, opts=None):
        return self._run("alltoall", list(zip(inputs, outputs)))

    def barrier(self, opts=None):
        return self._run("barrier", [])


_current: EmulatedGroup | None = None


def init(mover: Mover, backend: str) -> EmulatedGroup:
    """Make this process rank 0 of an emulated `mover.emulation.world`-rank default group, registered
    as torch.distributed backend `backend` (its name is the comm table's: bench/comms.py). The caller
    picks the mover, so that this module does not import proxy.py (which imports it)."""

    def create(store, rank, world, timeout):
        global _current
        _current = EmulatedGroup(rank, world, mover, backend)
        return _current

    if backend not in dist.Backend.backend_list:
        dist.Backend.register_backend(backend, create, devices=["cpu", "cuda"])
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=mover.emulation.world,
                            timeout=timedelta(minutes=5))
    return _current


def describe() -> dict:
    """What the results must say about the emulation: it is one, of what, and what it launched."""
    g = _current
    out = {"emulated": True, "note": "one process standing in for rank 0 of an N-rank job; collectives are "
           "paced proxy kernels with NCCL's CTA footprint (ccoverlap/bench/emulate.py), not NCCL",
           **dataclasses.asdict(g.mover.emulation), "calls": dict(g.calls)}
    if hasattr(g.mover, "footprint"):
        out["proxy_footprint"] = dataclasses.asdict(g.mover.footprint())
        out["proxy_launches"] = g.mover.launches
    return out
