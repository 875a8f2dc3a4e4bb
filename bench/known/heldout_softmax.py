"""Held out (written 2026-12-06 after the what-if's model and calibration were frozen; nothing fitted to it),
row-wise normalisation: softmax and layer norm (fp32, 16384 x 8192) alternated, six kernels; the collective
(32 CTAs x 512 threads, 16 KB; 1 ms), ready after the first, and the optimizer waits for it. What it realizes is
measured, not constructed."""
import torch

from common import main

ROWS, COLS = 16384, 8192


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(5)
    ctx.x = torch.randn(ROWS, COLS, device="cuda", generator=g)


def body(ctx, grad):
    y = torch.softmax(ctx.x, dim=-1)
    ctx.comm.all_reduce(grad, ctx.mark())
    for _ in range(2):
        y = torch.nn.functional.layer_norm(y, (COLS,))
        y = torch.softmax(y, dim=-1)
    y = torch.nn.functional.layer_norm(y, (COLS,))
    ctx.join(ctx.comm.stream)
    return y[0, :8].mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 32, "threads": 512, "smem": 16 * 1024, "ms": 1.0}, body, setup)
