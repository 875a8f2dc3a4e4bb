"""Training steps of each workload on one rank. A step returns its loss; `compute_only` runs the
same step with the collectives skipped (where that keeps the computation the same), so the
exposed communication is step time minus compute-only time."""
from __future__ import annotations

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
class Workload:
    step: Callable[[], torch.Tensor]
    compute_only: Callable[[], torch.Tensor] | None = None
    losses: list[float] = field(default_factory=list)
    note: str = ""  # why compute_only is missing, for the results

    def run_step(self) -> None:
        self.losses.append(float(self.step()))


def _dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def _tokens(cfg: BenchConfig, device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    s = cfg.size
    data = torch.randint(0, s.vocab, (s.batch, s.seq + 1), generator=g)
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
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank and strategy
    s = cfg.size
    return GPT(s.layers, s.d_model, s.heads, s.vocab, **kw).to(device, _dtype(device))


def ddp(cfg: BenchConfig, rank: int, world: int, device, no_overlap: bool) -> Workload:
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

    return Workload(step, compute_only)


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


def fsdp(cfg: BenchConfig, rank: int, world: int, device, no_overlap: bool) -> Workload:
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
    return Workload(_train_step(model, opt, inputs, targets, _sync if no_overlap else None),
                    note="FSDP always all-gathers parameters: no compute-only step")


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def tp(cfg: BenchConfig, rank: int, world: int, device, no_overlap: bool) -> Workload:
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
    inputs, targets = _tokens(cfg, device, cfg.seed + 1)  # tensor parallel ranks share their batch
    return Workload(_train_step(model, opt, inputs, targets), note="tensor parallelism has no compute-only step")


def moe(cfg: BenchConfig, rank: int, world: int, device, no_overlap: bool) -> Workload:
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

    return Workload(_train_step(model, opt, inputs, targets, average_shared),
                    note="the all-to-all is on the critical path: no compute-only step")


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
        parts = [torch.rand(count, generator=torch.Generator().manual_seed(cfg.seed + r)) for r in range(1 if emulated else world)]
        g = torch.Generator().manual_seed(cfg.seed + 999)
        a, b = (torch.rand(cfg.micro_gemm, cfg.micro_gemm, generator=g).to(device, _dtype(device)) for _ in range(2))
        mine = parts[0 if emulated else rank].to(device)
        return cls(nbytes, world, mine, mine.clone(), torch.stack(parts).sum(0).to(device), a, b, no_overlap)

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


def micro(cfg: BenchConfig, rank: int, world: int, device, no_overlap: bool) -> Iterator[Micro]:
    """One Micro per --micro-sizes byte count, each built when the last is done with."""
    return (Micro.build(cfg, nbytes, rank, world, device, no_overlap) for nbytes in cfg.micro_sizes)
