"""Held out (written 2026-12-06 at 62b126e, after that session's late-start pricing and before any result of this
program; nothing fitted to it), an optimizer's step beside the next bucket's collective: gradient-norm clipping
and a fused-foreach Adam update over 48 parameters (1024 x 4096 floats each: multi-tensor kernels), the collective
(32 CTAs x 640 threads, 82 KB; 1.2 ms) launched first on another bucket; the step's end needs it. What it realizes
is measured, not constructed."""
import torch

from common import main

PARAMS, ROWS, WIDTH = 48, 1024, 4096


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(33)
    ctx.params = [torch.nn.Parameter(torch.randn(ROWS, WIDTH, device="cuda", generator=g) * 0.02)
                  for _ in range(PARAMS)]
    for p in ctx.params:
        p.grad = torch.randn(ROWS, WIDTH, device="cuda", generator=g) * 1e-3
    ctx.adam = torch.optim.Adam(ctx.params, lr=1e-4, foreach=True)
    ctx.bucket = torch.randn(1 << 20, device="cuda", generator=g)


def body(ctx, grad):
    ctx.comm.all_reduce(ctx.bucket, ctx.mark())
    torch.nn.utils.clip_grad_norm_(ctx.params, 1.0, foreach=True)
    ctx.adam.step()
    ctx.join(ctx.comm.stream)
    return ctx.params[0][0, :8].mean() * 1e-3


if __name__ == "__main__":
    main(__doc__, {"ctas": 32, "threads": 640, "smem": 82 * 1024, "ms": 1.2}, body, setup)
