"""Held out (written 2026-12-06 after the what-if's model was changed at 362439d; nothing fitted to it), a long
memory-bound grid launched before the collective: a small elementwise kernel, then exp over 256 M floats (2 GB
moved; 128-thread blocks filling every SM), then the collective (16 CTAs x 544 threads, 64 KB; 1 ms),
ready after the first kernel; the optimizer waits for both. What it realizes is measured, not constructed."""
import torch

from common import main

SMALL, BIG = 1 << 22, 1 << 28


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(6)
    ctx.s = torch.randn(SMALL, device="cuda", generator=g)
    ctx.t = torch.randn(BIG, device="cuda", generator=g)
    ctx.u = torch.empty_like(ctx.t)


def body(ctx, grad):
    s = ctx.s * 0.5 + 1.0
    first = ctx.mark()
    torch.exp(ctx.t, out=ctx.u)
    ctx.comm.all_reduce(grad, first)  # launched after the grid: no record between the mark and this wait
    ctx.join(ctx.comm.stream)
    return s[:8].mean() + ctx.u[:8].mean() * 1e-3


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 544, "smem": 64 * 1024, "ms": 1.0}, body, setup)
