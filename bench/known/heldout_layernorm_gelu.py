"""Held out (written 2026-12-08, before any result of this program; nothing fitted to it), a transformer's MLP
sublayer in bf16: LayerNorm over 8,192 tokens of 2,048, a 2,048 -> 8,192 projection, GELU (tanh), the projection
back and the residual, forward then the gradients of the input and both weights; the collective (24 CTAs x 512
threads, no shared memory; 1.0 ms) ready after the LayerNorm, and the step's end needs it. What it realizes is
measured, not constructed."""
import torch

from common import main

TOKENS, DIM, HIDDEN = 8192, 2048, 8192


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(101)
    ctx.x = torch.randn(TOKENS, DIM, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    ctx.w1 = (torch.randn(HIDDEN, DIM, device="cuda", dtype=torch.bfloat16, generator=g) / 45.0).requires_grad_()
    ctx.w2 = (torch.randn(DIM, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=g) / 90.0).requires_grad_()
    ctx.ln = torch.nn.LayerNorm(DIM, device="cuda", dtype=torch.bfloat16)


def body(ctx, grad):
    h = ctx.ln(ctx.x)
    ctx.comm.all_reduce(grad, ctx.mark())
    y = ctx.x + torch.nn.functional.gelu(h @ ctx.w1.t(), approximate="tanh") @ ctx.w2.t()
    gx, g1, g2 = torch.autograd.grad(y.float().square().mean(), (ctx.x, ctx.w1, ctx.w2))
    ctx.join(ctx.comm.stream)
    return gx[0, :8].float().mean() + g1[0, :8].float().mean() + g2[0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 24, "threads": 512, "smem": 0, "ms": 1.0}, body, setup)
