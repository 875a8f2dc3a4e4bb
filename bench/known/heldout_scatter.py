"""Held out (written 2026-12-06 at cb5ec5f, before any change of that session; nothing fitted to it), an embedding's
backward: a gather of 512 K rows of 256 floats from a 1 M-row table (index_select), a scatter-add of them back
(index_add_, atomics), then a row norm; the collective (24 CTAs x 512 threads, 48 KB; 1 ms), ready after the
gather and launched after the scatter. What it realizes is measured, not constructed."""
import torch

from common import main

TABLE, ROWS, DIM = 1 << 20, 1 << 19, 256


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(11)
    ctx.table = torch.randn(TABLE, DIM, device="cuda", generator=g)
    ctx.idx = torch.randint(0, TABLE, (ROWS,), device="cuda", generator=g)
    ctx.acc = torch.zeros_like(ctx.table)


def body(ctx, grad):
    rows = ctx.table.index_select(0, ctx.idx)
    gathered = ctx.mark()
    ctx.acc.index_add_(0, ctx.idx, rows, alpha=1e-3)
    ctx.comm.all_reduce(grad, gathered)
    norm = ctx.acc[:4096].norm(dim=1)
    ctx.join(ctx.comm.stream)
    return norm.mean() * 1e-3


if __name__ == "__main__":
    main(__doc__, {"ctas": 24, "threads": 512, "smem": 48 * 1024, "ms": 1.0}, body, setup)
