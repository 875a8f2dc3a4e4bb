"""What each lab strategy changes; pure data, so it is tested without a GPU."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Strategy:
    name: str
    concurrent: bool = True  # compute and comm on two streams (else one stream, compute first)
    priority: bool = False  # comm on the device's highest-priority stream
    shape: bool = False  # pad compute blocks by the planner's amount
    carveout: bool = False  # cuBLAS SM carveout for comm's SMs (torch._C._set_sm_carveout_experimental)
    green: bool = False  # compute confined to a green context that leaves comm's SMs free
    shrink: bool = False  # fewer threads per comm CTA (as NCCL_NTHREADS gives)
    description: str = ""


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("sequential", concurrent=False, description="compute, then comm, on one stream"),
    Strategy("naive", description="two streams, default priority"),
    Strategy("priority", priority=True, description="comm on the highest-priority stream"),
    Strategy("shape", shape=True, description="planner's pad on compute, default priority"),
    Strategy("priority+shape", priority=True, shape=True, description="the paper: pad and priority"),
    Strategy("carveout", priority=True, carveout=True, description="cuBLAS leaves comm's SMs free, plus priority"),
    Strategy("green", green=True, description="compute confined to a green context without comm's SMs"),
    Strategy(
        "shrink+shape+priority", priority=True, shape=True, shrink=True,
        description="fewer threads per comm CTA, planned pad, priority",
    ),
)
BY_NAME = {s.name: s for s in STRATEGIES}
ORDERS = ("before", "with", "delayed")  # comm launched before compute, right after it, or delayed into it


def not_applicable(strategy: Strategy, shapeable: bool, uses_cublas: bool) -> str | None:
    """Why `strategy` cannot run on a compute phase, or None when it can."""
    if strategy.shape and not shapeable:
        return "library kernels are shaped by the launch interposer, which is not preloaded into this process"
    if strategy.carveout and not uses_cublas:
        return "SM carveout applies to cuBLAS matmuls only"
    return None
