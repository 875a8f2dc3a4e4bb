"""Held out (written 2026-12-06 at cb5ec5f, before any change of that session; nothing fitted to it), a step of
many small grids: 48 chained bf16 GEMMs of 1024 x 1024 (each grid under one wave), the collective (32 CTAs x 512
threads, no shared memory; 1.5 ms) launched first, on the gradient, and the last GEMM's output needs it. What it
realizes is measured, not constructed."""
import torch

from common import main

SIZE, LAYERS = 1024, 48


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(12)
    ctx.x = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16, generator=g)
    ctx.ws = [torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16, generator=g) / SIZE ** 0.5
              for _ in range(LAYERS)]


def body(ctx, grad):
    ctx.comm.all_reduce(grad, ctx.mark())
    h = ctx.x
    for w in ctx.ws[:-1]:
        h = torch.tanh(h @ w)
    ctx.join(ctx.comm.stream)
    return (h @ ctx.ws[-1])[0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 32, "threads": 512, "smem": 0, "ms": 1.5}, body, setup)
