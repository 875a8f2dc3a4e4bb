"""Held out (written 2026-12-07, before any result of this program; nothing fitted to it), a diffusion model's
normalization: two group norms (32 groups) with SiLU and a residual over 16 x 512 x 64 x 64 bf16 activations, forward
then the input's gradient; the collective (8 CTAs x 640 threads, 40 KB of shared memory; 1 ms) ready after the
forward, and the step's end needs it. What it realizes is measured, not constructed."""
import torch

from common import main

BATCH, CHANNELS, SIDE, GROUPS = 16, 512, 64, 32


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(73)
    ctx.x = torch.randn(BATCH, CHANNELS, SIDE, SIDE, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    ctx.affine = [torch.randn(CHANNELS, device="cuda", dtype=torch.bfloat16, generator=g) * 0.1 + 1.0
                  for _ in range(4)]


def body(ctx, grad):
    w1, b1, w2, b2 = ctx.affine
    h = torch.nn.functional.silu(torch.nn.functional.group_norm(ctx.x, GROUPS, w1, b1 - 1.0))
    h = torch.nn.functional.silu(torch.nn.functional.group_norm(h, GROUPS, w2, b2 - 1.0)) + ctx.x
    ctx.comm.all_reduce(grad, ctx.mark())
    (g,) = torch.autograd.grad(h.float().square().mean(), ctx.x)
    ctx.join(ctx.comm.stream)
    return g[0, 0, 0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 8, "threads": 640, "smem": 40 * 1024, "ms": 1.0}, body, setup)
