"""Held out (written 2026-12-06 at 62b126e, after that session's late-start pricing and before any result of this
program; nothing fitted to it), a language model's input side: an embedding (50,000 x 1024) looked up for 32,768
tokens, a layer norm, and the embedding's backward (torch's dense embedding backward: a sort of the indices and a
segmented sum); a collective on the dense gradient (16 CTAs x 512 threads, no shared memory; 1 ms) ready after the
forward; the step's end needs it. What it realizes is measured, not constructed."""
import torch

from common import main

VOCAB, DIM, TOKENS = 50_000, 1024, 32_768


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(32)
    ctx.table = torch.nn.Parameter(torch.randn(VOCAB, DIM, device="cuda", generator=g) * 0.02)
    ctx.ids = torch.randint(0, VOCAB, (TOKENS,), device="cuda", generator=g)


def body(ctx, grad):
    e = torch.nn.functional.embedding(ctx.ids, ctx.table)
    h = torch.nn.functional.layer_norm(e, (DIM,))
    ctx.comm.all_reduce(grad, ctx.mark())
    (g,) = torch.autograd.grad(h.square().mean(), ctx.table)
    ctx.join(ctx.comm.stream)
    return g[0, :8].mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 512, "smem": 0, "ms": 1.0}, body, setup)
