"""Held out (written 2026-12-07, before any result of this program; nothing fitted to it), a language model's
output side: a bf16 projection to a 32,000-token vocabulary (4096 tokens x 2048), the cross-entropy in fp32 and its
gradient to the logits (log-softmax, the loss, the softmax's backward: memory-bound reductions over 0.5 GB); the
collective (32 CTAs x 512 threads, no shared memory; 1.2 ms) ready after the projection, and the step's end needs
it. What it realizes is measured, not constructed."""
import torch

from common import main

TOKENS, DIM, VOCAB = 4096, 2048, 32_000


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(43)
    ctx.h = torch.randn(TOKENS, DIM, device="cuda", dtype=torch.bfloat16, generator=g)
    ctx.w = torch.randn(DIM, VOCAB, device="cuda", dtype=torch.bfloat16, generator=g) / DIM ** 0.5
    ctx.targets = torch.randint(0, VOCAB, (TOKENS,), device="cuda", generator=g)


def body(ctx, grad):
    logits = (ctx.h @ ctx.w).float().requires_grad_()
    ctx.comm.all_reduce(grad, ctx.mark())
    loss = torch.nn.functional.cross_entropy(logits, ctx.targets)
    (g,) = torch.autograd.grad(loss, logits)
    ctx.join(ctx.comm.stream)
    return loss.detach() * 1e-3 + g[0, :8].mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 32, "threads": 512, "smem": 0, "ms": 1.2}, body, setup)
