"""Training steps of each workload on one rank. A step returns its loss; `compute_only` runs the
same step with the collectives skipped (where that keeps the computation the same), so the
exposed communication is step time minus compute-only time."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.nn import functional as F

from ccoverlap.bench.models import GPT, MoE

if TYPE_CHECKING:
    from ccoverlap.bench.config import BenchConfig


@dataclass
class RankSteps:
    step: Callable[[], torch.Tensor]
    compute_only: Callable[[], torch.Tensor] | None = None
    losses: list[float] = field(default_factory=list)
    note: str = ""  # why compute_only is missing, for the results
    #: what the workload counted over the steps run so far (name -> number), reported in its rows
    counters: Callable[[], dict[str, float]] = dict
    #: its collectives run across steps: timing must not drain the device or align the ranks between steps
    background: bool = False

    def run_step(self) -> None:
        self.losses.append(float(self.step()))


def _dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def _tokens(cfg: BenchConfig, device, seed: int, sequences: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`sequences` (default --batch) random sequences of --seq tokens, inputs and next-token targets."""
    g = torch.Generator().manual_seed(seed)
    s = cfg.size
    data = torch.randint(0, s.vocab, (sequences or s.batch, s.seq + 1), generator=g)
    return data[:, :-1].to(device), data[:, 1:].to(device)


def _train_step(model, opt, inputs, targets, no_overlap_sync=None) -> Callable[[], torch.Tensor]:
    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        if no_overlap_sync:
            no_overlap_sync()
        opt.step()
        return loss.detach()

    return step


def _gpt(cfg: BenchConfig, device, **kw) -> GPT:
    """The model, initialised where it runs: torch's CPU initialisation is serial, seconds for the full model, paid
    by every workload of every process set."""
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank and strategy (CUDA's generators too)
    s = cfg.size
    with torch.device(device):
        return GPT(s.layers, s.d_model, s.heads, s.vocab, **kw).to(_dtype(device))


def ddp(cfg: BenchConfig, rank: int, world: int, device, no_overlap: bool) -> RankSteps:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(_gpt(cfg, device), device_ids=[device.index] if device.type == "cuda" else None)
    if no_overlap:
        model.register_comm_hook(None, _blocking_allreduce)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs, targets = _tokens(cfg, device, cfg.seed + 1 + rank)
    step = _train_step(model, opt, inputs, targets)

    def compute_only():
        with model.no_sync():
            return step()

    return RankSteps(step, compute_only)


def _blocking_allreduce(_, bucket):
    """DDP comm hook that finishes each bucket's all-reduce before backward goes on."""
    tensor = bucket.buffer()
    dist.all_reduce(tensor)
    tensor.div_(dist.get_world_size())
    if tensor.is_cuda:
        torch.cuda.current_stream().synchronize()
    fut = torch.futures.Future()
    fut.set_result(tensor)
    return fut


def fsdp(cfg: BenchConfig, rank: int, world: int, device, no_overlap: bool) -> RankSteps:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world,))
    model = _gpt(cfg, device)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if no_overlap:
        model.set_modules_to_forward_prefetch([])
        for block in model.blocks:
            block.set_modules_to_forward_prefetch([])
            block.set_modules_to_backward_prefetch([])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs, targets = _tokens(cfg, device, cfg.seed + 1 + rank)
    return RankSteps(_train_step(model, opt, inputs, targets, _sync if no_overlap else None),
                    note="FSDP always all-gathers parameters: no compute-only step")


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def tp(cfg: BenchConfig, rank: int, world: int, device, no_overlap: bool) -> RankSteps:
    """Tensor-parallel ranks share one batch, so they train on the global batch (--batch x world sequences):
    each rank's share of the sharded blocks is then about one DDP rank's work. The embedding, the final norm
    and the output head are not sharded: every rank computes them over the whole global batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(device.type, (world,))
    model = _gpt(cfg, device)
    plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.o": RowwiseParallel(), "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel()}
    for block in model.blocks:
        parallelize_module(block, mesh, plan)
    # foreach kernels refuse a mix of DTensor (sharded) and plain (replicated) parameters on CUDA
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)
    inputs, targets = _tokens(cfg, device, cfg.seed + 1, cfg.size.batch * world)  # one batch shared by all ranks
    return RankSteps(_train_step(model, opt, inputs, targets), note="tensor parallelism has no compute-only step")


def moe(cfg: BenchConfig, rank: int, world: int, device, no_overlap: bool) -> RankSteps:
    s = cfg.size
    model = _gpt(cfg, device, mlp_factory=lambda: MoE(s.d_model, s.experts_per_rank))
    torch.manual_seed(cfg.seed + 100 + rank)  # experts differ per rank
    for block in model.blocks:
        for p in block.mlp.experts.parameters():
            torch.nn.init.normal_(p, std=0.02)
    shared = [p for n, p in model.named_parameters() if ".experts." not in n]
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs, targets = _tokens(cfg, device, cfg.seed + 1 + rank)

    def average_shared():
        # data parallel for everything but the experts: average those gradients
        for p in shared:
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad.div_(world)

    return RankSteps(_train_step(model, opt, inputs, targets, average_shared),
                    note="the all-to-all is on the critical path: no compute-only step")


#: Streaming DiLoCo's schedule (Douillard et al. 2025). The model is cut into FRAGMENTS fragments, one of them
#: synchronised per inner step, round-robin: each fragment is synced every FRAGMENTS inner steps and only a
#: FRAGMENTS-th of the model is on the wire at a time. A fragment's all-reduce runs beside the WINDOW inner steps
#: after its launch before the program waits for it (the paper's overlap tau): communication stays hidden as
#: long as it takes less than WINDOW inner steps. A model of fewer blocks has fewer fragments, and the window
#: is at most the fragments, so a fragment is never in flight twice.
FRAGMENTS, WINDOW = 4, 2
#: the outer optimizer (SGD with Nesterov momentum on the anchor, the averaged delta as its gradient) and the
#: merge of a fragment's local parameters with its new anchor (this much of the local ones kept), as in the papers
OUTER_LR, OUTER_MOMENTUM, MERGE_LOCAL = 0.7, 0.9, 0.5
#: a wait that stalled the GPU stream longer than this found its sync unfinished: late
LATE_MS = 0.05


@dataclass
class _Fragment:
    params: list[torch.Tensor]  # the model's, updated by the inner optimizer
    anchor: list[torch.Tensor]  # the global copy (float32), updated by the outer optimizer
    outer: torch.optim.Optimizer


@dataclass
class _Sync:
    fragment: _Fragment
    delta: torch.Tensor  # anchor - params, flat float32: summed over ranks by the all-reduce
    work: dist.Work
    waited: bool = False


class StreamingDiLoCo:
    """The outer loop of streaming DiLoCo over a GPT's fragments (contiguous groups of blocks, the embedding
    with the first, the final norm and head with the last). `after_inner_step(t)` lands the sync launched at
    step t - window (waits for it, steps the outer optimizer, merges) and launches fragment t % fragments.
    The outer optimizers only ever step after an inner step: the inner optimizer is the program's first.
    `no_overlap` waits for each all-reduce as it is launched (the outer update still lands after the window,
    so every strategy computes the same); whether a sync finished within its window is measured at its wait."""

    def __init__(self, model, world: int, no_overlap: bool = False, fragments: int = FRAGMENTS, window: int = WINDOW):
        groups = [list(part) for part in torch.tensor_split(torch.arange(len(model.blocks)),
                                                            min(fragments, len(model.blocks)))]
        self.fragments = []
        for i, blocks in enumerate(groups):
            modules = [model.blocks[b] for b in blocks] + ([model.emb] if i == 0 else []) \
                + ([model.ln_f, model.head] if i == len(groups) - 1 else [])
            params = [p for m in modules for p in m.parameters()]
            anchor = [p.detach().float().clone().requires_grad_() for p in params]
            outer = torch.optim.SGD(anchor, lr=OUTER_LR, momentum=OUTER_MOMENTUM, nesterov=True)
            self.fragments.append(_Fragment(params, anchor, outer))
        self.world, self.no_overlap = world, no_overlap
        self.window = min(window, len(self.fragments))
        self.in_flight: dict[int, _Sync] = {}  # launch step -> its sync
        self.syncs = self.late = 0
        self.stall_ms = 0.0
        self.stalls: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []  # CUDA: read when counted

    @torch.no_grad()
    def launch(self, step: int) -> None:
        f = self.fragments[step % len(self.fragments)]
        delta = torch.cat([(a - p.float()).reshape(-1) for a, p in zip(f.anchor, f.params)])
        sync = _Sync(f, delta, dist.all_reduce(delta, async_op=True))
        if self.no_overlap:
            sync.work.wait()
            _sync()
            sync.waited = True
        self.in_flight[step] = sync

    def _wait(self, sync: _Sync) -> None:
        """Wait, and measure whether the sync had finished: on CUDA the stall of the stream at the wait."""
        if sync.delta.is_cuda:
            before, after = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            before.record()
            sync.work.wait()
            after.record()
            self.stalls.append((before, after))
        else:
            done = sync.work.is_completed()
            t0 = time.perf_counter()
            sync.work.wait()
            if not done:
                self.late += 1
                self.stall_ms += (time.perf_counter() - t0) * 1e3

    @torch.no_grad()
    def land(self, step: int) -> None:
        sync = self.in_flight.pop(step - self.window, None)
        if sync is None:
            return
        if not sync.waited:
            self._wait(sync)
        f = sync.fragment
        for a, g in zip(f.anchor, sync.delta.div_(self.world).split([a.numel() for a in f.anchor])):
            a.grad = g.view_as(a)
        f.outer.step()
        for p, a in zip(f.params, f.anchor):
            p.mul_(MERGE_LOCAL).add_(a.to(p.dtype), alpha=1 - MERGE_LOCAL)
        self.syncs += 1

    def after_inner_step(self, step: int) -> None:
        self.land(step)
        self.launch(step)

    def drain(self) -> None:
        """Wait for every sync in flight and drop them (before steps that must run without communication)."""
        for sync in self.in_flight.values():
            sync.work.wait()
        self.in_flight.clear()

    def counters(self) -> dict[str, float]:
        for before, after in self.stalls:
            after.synchronize()
            if (ms := before.elapsed_time(after)) > LATE_MS:
                self.late += 1
                self.stall_ms += ms
        self.stalls.clear()
        return {"syncs": self.syncs, "late_syncs": self.late, "stall_ms": self.stall_ms}


def diloco(cfg: BenchConfig, rank: int, world: int, device, no_overlap: bool) -> RankSteps:
    """Streaming DiLoCo: local inner steps (each rank its own data, no collective), model fragments all-reduced
    in the background (StreamingDiLoCo). compute_only: the inner steps alone."""
    model = _gpt(cfg, device)
    outer = StreamingDiLoCo(model, world, no_overlap)
    inner = _train_step(model, torch.optim.SGD(model.parameters(), lr=1e-3), *_tokens(cfg, device, cfg.seed + 1 + rank))
    steps = 0

    def step():
        nonlocal steps
        loss = inner()
        outer.after_inner_step(steps)
        steps += 1
        return loss

    def compute_only():
        outer.drain()
        return inner()

    dist.barrier()  # the ranks start together: no barrier aligns their steps from here on (background=True)
    return RankSteps(step, compute_only, counters=outer.counters, background=True)


@dataclass
class Micro:
    """A GEMM chain on the compute stream beside an all-reduce of `nbytes` (nccl-tests style rows)."""

    nbytes: int
    world: int
    tensor: torch.Tensor
    initial: torch.Tensor
    expected: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    no_overlap: bool

    @classmethod
    def build(cls, cfg: BenchConfig, nbytes: int, rank: int, world: int, device, no_overlap: bool) -> Micro:
        count = nbytes // 4
        # emulated ranks add zeros (bench/emulate.py): the sum is this rank's part
        emulated = cfg.comm_backend.emulated
        # drawn where they are used, as the models are (a CPU draw of 256 MiB and two 8192^2 matrices takes seconds)
        parts = [torch.rand(count, generator=_generator(device, cfg.seed + r), device=device)
                 for r in range(1 if emulated else world)]
        g = _generator(device, cfg.seed + 999)
        a, b = (torch.rand(cfg.micro_gemm, cfg.micro_gemm, generator=g, device=device).to(_dtype(device))
                for _ in range(2))
        mine = parts[0 if emulated else rank]
        return cls(nbytes, world, mine, mine.clone(), torch.stack(parts).sum(0), a, b, no_overlap)

    def reset(self) -> None:
        """This rank's data again, before each timed all-reduce."""
        self.tensor.copy_(self.initial)

    def gemms(self) -> None:
        c = self.a
        for _ in range(4):
            c = c @ self.b
        self.out = c

    def overlapped(self) -> None:
        work = dist.all_reduce(self.tensor, async_op=True)
        if self.no_overlap:
            work.wait()
            _sync()
        self.gemms()
        work.wait()

    def allreduce_alone(self) -> None:
        dist.all_reduce(self.tensor)

    def wrong(self) -> int:
        """Elements off the expected sum by more than float32 rounding of `world` terms (nccl-tests' #wrong)."""
        return int((~torch.isclose(self.tensor, self.expected, rtol=1e-5, atol=1e-6)).sum())


def _generator(device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def micro(cfg: BenchConfig, rank: int, world: int, device, no_overlap: bool) -> Iterator[Micro]:
    """One Micro per --micro-sizes byte count, each built when the last is done with."""
    return (Micro.build(cfg, nbytes, rank, world, device, no_overlap) for nbytes in cfg.micro_sizes)


def build(name: str, cfg: BenchConfig, rank: int, world: int, device, no_overlap: bool) -> RankSteps:
    """The steps of workload `name` (catalog.WORKLOADS: its builder is the function of that name here) on one rank."""
    return globals()[name](cfg, rank, world, device, no_overlap)
