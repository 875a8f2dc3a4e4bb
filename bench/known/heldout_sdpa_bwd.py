"""Held out (written 2026-12-07, before any result of this program; nothing fitted to it), causal attention's
backward: torch's scaled_dot_product_attention (flash attention on sm_90) over 8 x 16 heads x 4096 tokens x 128 in
bf16, forward then the gradients of q, k and v; the collective (24 CTAs x 544 threads, 100 KB of shared memory, as
NCCL's ring/Simple launches it; 1 ms) ready after the forward, and the step's end needs it. What it realizes is
measured, not constructed."""
import torch

from common import main

BATCH, HEADS, TOKENS, DIM = 8, 16, 4096, 128


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(71)
    ctx.qkv = [torch.randn(BATCH, HEADS, TOKENS, DIM, device="cuda", dtype=torch.bfloat16, generator=g)
               .requires_grad_() for _ in range(3)]


def body(ctx, grad):
    o = torch.nn.functional.scaled_dot_product_attention(*ctx.qkv, is_causal=True)
    ctx.comm.all_reduce(grad, ctx.mark())
    gq, _, _ = torch.autograd.grad(o.float().square().mean(), ctx.qkv)
    ctx.join(ctx.comm.stream)
    return gq[0, 0, 0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 24, "threads": 544, "smem": 100 * 1024, "ms": 1.0}, body, setup)
