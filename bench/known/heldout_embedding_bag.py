"""Held out (written 2026-12-07, before any result of this program; nothing fitted to it), a recommendation model's
sparse side: four embedding bags (sum over 40 ids a sample, 262,144 rows of 128 fp32 each; 8,192 samples) and their
backward (the ids sorted, the gradients summed per row), then a two-layer bf16 MLP over the pooled features; the
collective (32 CTAs x 288 threads, 48 KB of shared memory; 1 ms) is launched first, on the previous bucket, and the
step's end needs it. What it realizes is measured, not constructed."""
import torch

from common import main

TABLES, ROWS, DIM, SAMPLES, IDS, HIDDEN = 4, 1 << 18, 128, 8192, 40, 1024


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(92)
    ctx.tables = [(torch.randn(ROWS, DIM, device="cuda", generator=g) * 0.01).requires_grad_() for _ in range(TABLES)]
    ctx.ids = [torch.randint(0, ROWS, (SAMPLES * IDS,), device="cuda", generator=g) for _ in range(TABLES)]
    ctx.offsets = torch.arange(0, SAMPLES * IDS, IDS, device="cuda")
    ctx.w1 = torch.randn(TABLES * DIM, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=g) / (TABLES * DIM) ** 0.5
    ctx.w2 = torch.randn(HIDDEN, 1, device="cuda", dtype=torch.bfloat16, generator=g) / HIDDEN ** 0.5


def body(ctx, grad):
    ctx.comm.all_reduce(grad, ctx.mark())
    pooled = torch.cat([torch.nn.functional.embedding_bag(i, t, ctx.offsets, mode="sum")
                        for i, t in zip(ctx.ids, ctx.tables)], dim=1)
    y = torch.relu(pooled.to(torch.bfloat16) @ ctx.w1) @ ctx.w2
    grads = torch.autograd.grad(y.float().square().mean(), ctx.tables)
    ctx.join(ctx.comm.stream)
    return sum(g[0, :8].sum() for g in grads)


if __name__ == "__main__":
    main(__doc__, {"ctas": 32, "threads": 288, "smem": 48 * 1024, "ms": 1.0}, body, setup)
