"""Held out (written 2026-12-07, before any result of this program; nothing fitted to it), a scatter by atomics:
2M rows of 128 fp32 features summed into 65,536 buckets (index_add_, random indices), then a SiLU and a row sum;
the collective (16 CTAs x 512 threads, no shared memory; 0.8 ms) is launched first, on the previous bucket, and the
step's end needs it. Atomics in float: its losses may differ in their last bits between runs. What it realizes is
measured, not constructed."""
import torch

from common import main

ROWS, BUCKETS, DIM = 1 << 21, 1 << 16, 128


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(72)
    ctx.src = torch.randn(ROWS, DIM, device="cuda", generator=g)
    ctx.idx = torch.randint(0, BUCKETS, (ROWS,), device="cuda", generator=g)


def body(ctx, grad):
    ctx.comm.all_reduce(grad, ctx.mark())
    out = torch.zeros(BUCKETS, DIM, device="cuda")
    out.index_add_(0, ctx.idx, ctx.src)
    y = torch.nn.functional.silu(out).sum(dim=1)
    ctx.join(ctx.comm.stream)
    return y[:8].mean() * 1e-3


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 512, "smem": 0, "ms": 0.8}, body, setup)
