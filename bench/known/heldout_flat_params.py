"""Held out (written 2026-12-06 at 62b126e, after that session's late-start pricing and before any result of this
program; nothing fitted to it), an FSDP-like layer: eight parameter shards (4096 x 1024 bf16 each) copied into one
flat buffer (contiguous copies: the runtime's device-to-device copies), the previous layer's gradient bucket reduced
by a collective launched before the copies (24 CTAs x 544 threads, 68 KB; 0.8 ms), then a bf16 GEMM with the
gathered weight and its GELU; the step's end needs the collective. What it realizes is measured, not constructed."""
import torch

from common import main

SHARDS, ROWS, WIDTH, TOKENS = 8, 4096, 1024, 8192


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(31)
    ctx.shards = [torch.randn(ROWS, WIDTH, device="cuda", dtype=torch.bfloat16, generator=g) / ROWS ** 0.5
                  for _ in range(SHARDS)]
    ctx.flat = torch.empty(SHARDS * ROWS, WIDTH, device="cuda", dtype=torch.bfloat16)
    ctx.x = torch.randn(TOKENS, SHARDS * ROWS, device="cuda", dtype=torch.bfloat16, generator=g)


def body(ctx, grad):
    ctx.comm.all_reduce(grad, ctx.mark())
    for i, s in enumerate(ctx.shards):
        ctx.flat[i * ROWS:(i + 1) * ROWS].copy_(s)
    h = torch.nn.functional.gelu(ctx.x @ ctx.flat)
    ctx.join(ctx.comm.stream)
    return h[0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 24, "threads": 544, "smem": 68 * 1024, "ms": 0.8}, body, setup)
