"""Held out (written 2026-12-06 at cb5ec5f, before any change of that session; nothing fitted to it), unfused
attention: batched bf16 scores (128 heads of 2048 x 128 by 128 x 2048), a softmax over them (1 GB read and
written), the batched product with the values; the collective (16 CTAs x 640 threads, 82 KB; 0.8 ms), ready after
the scores and launched after the softmax; the output needs it. What it realizes is measured, not constructed."""
import torch

from common import main

HEADS, SEQ, DIM = 128, 2048, 128


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(13)
    ctx.q, ctx.k, ctx.v = (torch.randn(HEADS, SEQ, DIM, device="cuda", dtype=torch.bfloat16, generator=g)
                           for _ in range(3))


def body(ctx, grad):
    scores = torch.bmm(ctx.q, ctx.k.transpose(1, 2)) * DIM ** -0.5
    ready = ctx.mark()
    p = torch.softmax(scores, dim=-1)
    ctx.comm.all_reduce(grad, ready)
    o = torch.bmm(p, ctx.v)
    ctx.join(ctx.comm.stream)
    return o[0, 0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 640, "smem": 82 * 1024, "ms": 0.8}, body, setup)
