"""Held out (written 2026-12-06 after the what-if's model and calibration were frozen; nothing fitted to it),
attention: torch's scaled_dot_product_attention (bf16, 4 x 16 heads x 4096 x 128, its flash kernel) three times
chained; the collective (16 CTAs x 640 threads, 82 KB; 1 ms), ready after the first, and the last attention's
output needs it. What it realizes is measured, not constructed."""
import torch

from common import main

SHAPE = (4, 16, 4096, 128)


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(4)
    ctx.q, ctx.k, ctx.v = (torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))


def body(ctx, grad):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    o = sdpa(ctx.q, ctx.k, ctx.v)
    ctx.comm.all_reduce(grad, ctx.mark())
    o = sdpa(o, ctx.k, ctx.v)
    o = sdpa(o, ctx.k, ctx.v)
    ctx.join(ctx.comm.stream)
    return o[0, 0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 640, "smem": 82 * 1024, "ms": 1.0}, body, setup)
