"""Held out (written 2026-12-06 after the what-if's model and calibration were frozen; nothing fitted to it), an
MLP block: a bf16 GEMM (8192 x 4096 by 4096 x 8192), GELU, a second GEMM back to 4096, a layer norm; the
collective (24 CTAs x 544 threads, 68 KB, as NCCL's ring Simple launches it; 1 ms), ready after the first GEMM,
and the layer norm's output needs it. What it realizes is measured, not constructed."""
import torch

from common import main

ROWS, WIDTH, HIDDEN = 8192, 4096, 8192


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(2)
    ctx.x = torch.randn(ROWS, WIDTH, device="cuda", dtype=torch.bfloat16, generator=g)
    ctx.w1 = torch.randn(WIDTH, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=g) / WIDTH ** 0.5
    ctx.w2 = torch.randn(HIDDEN, WIDTH, device="cuda", dtype=torch.bfloat16, generator=g) / HIDDEN ** 0.5


def body(ctx, grad):
    h = ctx.x @ ctx.w1
    ctx.comm.all_reduce(grad, ctx.mark())
    o = torch.nn.functional.gelu(h) @ ctx.w2
    o = torch.nn.functional.layer_norm(o + ctx.x, (WIDTH,))
    ctx.join(ctx.comm.stream)
    return o[0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 24, "threads": 544, "smem": 68 * 1024, "ms": 1.0}, body, setup)
