"""One GPU standing in for one rank of an N-rank job (`ccoverlap bench --comm emulate`).

This is an **emulation**. One process joins a process group that says it has N ranks, so DDP,
FSDP2, tensor parallelism and the MoE layer shard and launch exactly what rank 0 of an N-rank job
would. Each collective is replaced by a communication proxy kernel with the footprint NCCL launches
for that collective (threads, CTAs and cluster per collective kind and message size, under NCCL's
own knobs; registers, static and dynamic shared memory of NCCL's kernels) that moves the bytes a
ring collective moves per rank, paced to a bus bandwidth: the proxy's CTAs stay resident for as
long as the real collective would, so compute and communication contend for SMs as they would with
NCCL. What it cannot show: other ranks' skew, NVLink itself, NCCL's protocol choice per size, and
NCCL_CTA_POLICY (comms.py says why).

Data: every other rank is taken to hold what this one holds, and to add zeros. All-reduce and
broadcast leave the tensor as it is, all-gather tiles this rank's shard, reduce-scatter keeps
this rank's chunk, all-to-all returns what it sent. Results are deterministic, so every strategy
must reproduce the baseline's losses, as with real collectives.
"""
from __future__ import annotations

import dataclasses
import os
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from ccoverlap.model import nccl
from ccoverlap.util.errors import check_range


def ring_bytes(kind: str, nbytes: int, world: int) -> int:
    """Bytes a ring collective moves through each rank; `nbytes` is its largest buffer (the full
    all-gather output, the full reduce-scatter input)."""
    return int(nbytes * nccl.RING_FACTORS[kind](world))


@dataclass(frozen=True)
class Footprint:
    """Which launch NCCL 2.28.9 was seen making (nccl.OBSERVED_LAUNCHES) an emulated collective stands for:
    `launch` for messages of SMALL_BYTES_PER_RANK x world bytes or more, `small` below that."""

    launch: str
    small: str | None
    basis: str  # observed, or the assumption made


_LIKE_ALLGATHER = "ASSUMPTION: as AllGather (a ring pipeline of the same shape); not observed"
_P2P = "NCCL runs it as grouped send/recv (src/enqueue.cc); observed for all-to-all"
#: per emulated collective (the names EmulatedGroup counts); barrier launches nothing
FOOTPRINTS: dict[str, Footprint] = {
    "allreduce": Footprint("allreduce", "allgather-small", "observed (ring LL); small: ASSUMPTION, "
                           "ring LL's one-channel shape as observed for AllGather"),
    "allgather": Footprint("allgather", "allgather-small", "observed (ring Simple; ring LL for small messages)"),
    "reduce_scatter": Footprint("allgather", "allgather-small", _LIKE_ALLGATHER),
    "broadcast": Footprint("allgather", "allgather-small", _LIKE_ALLGATHER),
    "alltoall": Footprint("sendrecv", None, _P2P),
    "scatter": Footprint("sendrecv", None, _P2P),
    "gather": Footprint("sendrecv", None, _P2P),
}
#: NCCL's ring LL tuning (src/enqueue.cc topoGetAlgoInfo: channels dropped, then threads halved, while
#: nBytes < channels x threads x 8 x nRanks) leaves one channel of at most 128 threads below 2048 x nRanks bytes,
#: the small AllGather seen on 2 x H200. ASSUMPTIONS: NCCL picks LL for such messages; from this size on the
#: emulation takes the large launch (NCCL would grow channels and threads with the size; the proxy's pacing
#: uses no more CTAs than it has steps of work); NCCL's protocol choice for large messages is not modelled.
SMALL_BYTES_PER_RANK = 2048


@dataclass(frozen=True)
class Shape:
    """What NCCL would launch for one collective: threads and CTAs by its rules, the cluster size it asks
    for (a grid that size does not divide launches without: nccl.cluster_dim), dynamic shared memory."""

    kind: str
    launch: str  # the key of nccl.OBSERVED_LAUNCHES
    protocol: str
    threads: int
    ctas: int
    cluster: int
    dynamic_smem: int


@dataclass(frozen=True)
class Emulation:
    """What the proxies stand for: N ranks linked at `busbw_gbps`, NCCL's launches under its knobs, its stream."""

    world: int = 8
    busbw_gbps: float = 280.0
    knobs: nccl.Knobs = nccl.Knobs()
    high_priority: bool = False
    clusters: bool = True  # the GPU launches thread-block clusters (sm_90 and newer), as NCCL does there

    def validate(self) -> Emulation:
        check_range("--emulate-world", self.world, 2, 4096)
        check_range("--busbw", self.busbw_gbps, 1, 100000)
        return self

    @classmethod
    def from_env(cls, world: int, busbw_gbps: float, env=os.environ) -> Emulation:
        """The NCCL and torch variables a strategy sets apply to the proxies as they would to NCCL (nccl.Knobs);
        UsageError for a value that is no number."""
        return cls(world, busbw_gbps, nccl.Knobs.from_env(env),
                   high_priority=env.get("TORCH_NCCL_HIGH_PRIORITY", "0") == "1").validate()

    def shape(self, kind: str, nbytes: int) -> Shape:
        """NCCL's launch for collective `kind` whose largest buffer is `nbytes` (NCCL's nBytes)."""
        fp = FOOTPRINTS[kind]
        key = fp.small if fp.small and nbytes < SMALL_BYTES_PER_RANK * self.world else fp.launch
        seen, protocol = nccl.OBSERVED_LAUNCHES[key], nccl.PROTOCOLS[key]
        if protocol == "P2P":
            ctas = self.knobs.p2p_channels()
        elif seen.grid < nccl.CHANNELS:  # tuned down for its size: NCCL_MAX_CTAS can only lower it further
            ctas = min(seen.grid, self.knobs.channels())
        else:
            ctas = self.knobs.channels()
        return Shape(kind, key, protocol, self.knobs.threads(protocol, seen.threads), ctas,
                     self.knobs.cluster if self.clusters else 0, seen.dynamic_smem)

    def footprints(self) -> dict[str, dict]:
        """Per collective kind, the launch it takes (and for small messages), with its basis: for the results."""
        big = SMALL_BYTES_PER_RANK * self.world
        return {kind: {"basis": fp.basis, "from_bytes": big, "launch": _shown(self.shape(kind, big))}
                | ({"below_bytes": big, "small": _shown(self.shape(kind, 0))} if fp.small else {})
                for kind, fp in FOOTPRINTS.items()}

    def notes(self) -> list[str]:
        """What NCCL made of the knobs, and the one it reads that the emulation does not act on."""
        policy = nccl.CTA_POLICY_VALUES.get(self.knobs.cta_policy)
        unread = [f"NCCL_CTA_POLICY={self.knobs.cta_policy} ({policy}): not emulated, as NCCL would change nothing: "
                  f"{nccl.CTA_POLICY_REACH[policy]}"] if policy else []
        return [*self.knobs.notes, *unread]

    def duration_ns(self, nbytes: int) -> int:
        return int(nbytes / self.busbw_gbps)  # bytes / (GB/s) = ns


def _shown(shape: Shape) -> dict:
    return {k: v for k, v in dataclasses.asdict(shape).items() if k != "kind"}


class LaunchLog:
    """How many launches of each shape each kind made: what the results show the emulation did."""

    def __init__(self):
        self.counts: Counter[tuple[str, int, int, int]] = Counter()

    def add(self, kind: str, threads: int, ctas: int, cluster: int) -> None:
        self.counts[kind, threads, ctas, cluster] += 1

    def to_dict(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for (kind, threads, ctas, cluster), n in sorted(self.counts.items()):
            out.setdefault(kind, []).append({"threads": threads, "ctas": ctas, "cluster": cluster, "launches": n})
        return out


class Mover(Protocol):
    """What carries out the emulated collectives: CpuMover here, ProxyMover (bench/proxy.py) on a GPU."""

    emulation: Emulation
    log: LaunchLog

    def move(self, src: torch.Tensor, dst: torch.Tensor, nbytes: int, shape: Shape) -> None: ...

    def done(self, outputs: list[torch.Tensor]) -> torch.futures.Future: ...


class CpuMover:
    """The data part only, with torch copies: for the orchestration on machines without a GPU."""

    def __init__(self, emulation: Emulation):
        self.emulation = emulation
        self.moved_bytes = 0
        self.log = LaunchLog()

    def move(self, src: torch.Tensor, dst: torch.Tensor, nbytes: int, shape: Shape) -> None:
        """The data, and the launch NCCL would make as the record of it (nothing is launched)."""
        tile(src, dst)
        self.moved_bytes += nbytes
        self.log.add(shape.kind, shape.threads, shape.ctas, nccl.cluster_dim(shape.cluster, shape.ctas))

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
            self.mover.move(src, dst, ring_bytes(kind, size, self.size()), self.mover.emulation.shape(kind, size))
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
    """What the results must say about the emulation: it is one, of what, under which knobs, with which
    footprint per collective kind, and what it launched."""
    g = _current
    e = g.mover.emulation
    out = {"emulated": True, "note": "one process standing in for rank 0 of an N-rank job; collectives are "
           "paced proxy kernels with the footprints NCCL 2.28.9 was seen launching per collective "
           "(ccoverlap/bench/emulate.py), not NCCL",
           "world": e.world, "busbw_gbps": e.busbw_gbps, "high_priority": e.high_priority,
           "knobs": {k: v for k, v in dataclasses.asdict(e.knobs).items() if k != "notes"}, "notes": e.notes(),
           "footprints": e.footprints(), "calls": dict(g.calls), "launches": g.mover.log.to_dict()}
    if hasattr(g.mover, "kernel"):
        out["proxy"] = {"regs": g.mover.kernel.regs, "static_smem": g.mover.kernel.static_smem,
                        "unroll": g.mover.unroll}
    return out
