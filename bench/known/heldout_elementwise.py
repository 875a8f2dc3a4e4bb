"""Held out (written 2026-12-06 after the what-if's model and calibration were frozen; nothing fitted to it),
memory-bound elementwise work: eight torch elementwise kernels over 64 M floats each (sin, multiply-add, exp, abs,
a reduction), each about a tenth of a millisecond; the collective (16 CTAs x 640 threads, 82 KB; 1 ms), ready after
the first, and the optimizer waits for it. What it realizes is measured, not constructed."""
import torch

from common import main

SIZE = 64 * 1024 * 1024


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(3)
    ctx.t = torch.randn(SIZE, device="cuda", generator=g)


def body(ctx, grad):
    u = torch.sin(ctx.t)
    ctx.comm.all_reduce(grad, ctx.mark())
    v = u * ctx.t + 1.0
    w = torch.exp(-v.abs())
    v = w * u - v
    w = torch.cos(v) + w
    s = (w * w).sum()
    ctx.join(ctx.comm.stream)
    return s * 1e-9


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 640, "smem": 82 * 1024, "ms": 1.0}, body, setup)
