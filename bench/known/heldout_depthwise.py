"""Held out (written 2026-12-07, before any result of this program; nothing fitted to it), a state-space block's
short convolution and scan: a causal depthwise conv1d (width 4; torch ran its own depthwise kernel, not cuDNN, as
the capture shows) over 8 x 1536 channels x 4096 steps in bf16, SiLU, a cumulative sum along the steps in fp32 (a
naive scan), a gate and a bf16 projection 1536 -> 1536, forward then the input's gradient; the collective (8 CTAs x
512 threads, 64 KB of shared memory; 1.1 ms) ready after the convolution, before the rest, and the step's end needs
it. What it realizes is measured, not constructed."""
import torch

from common import main

BATCH, CHANNELS, STEPS, WIDTH = 8, 1536, 4096, 4


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(83)
    ctx.x = torch.randn(BATCH, CHANNELS, STEPS, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    ctx.conv = torch.randn(CHANNELS, 1, WIDTH, device="cuda", dtype=torch.bfloat16, generator=g) * 0.5
    ctx.proj = torch.randn(CHANNELS, CHANNELS, device="cuda", dtype=torch.bfloat16, generator=g) / CHANNELS ** 0.5


def body(ctx, grad):
    u = torch.nn.functional.conv1d(ctx.x, ctx.conv, padding=WIDTH - 1, groups=CHANNELS)[..., :STEPS]
    ctx.comm.all_reduce(grad, ctx.mark())
    s = torch.cumsum(torch.nn.functional.silu(u).float(), dim=-1) / STEPS
    gated = (s * torch.sigmoid(ctx.x.float())).to(torch.bfloat16)
    y = torch.einsum("bcl,cd->bdl", gated, ctx.proj)
    (g,) = torch.autograd.grad(y.float().square().mean(), ctx.x)
    ctx.join(ctx.comm.stream)
    return g[0, 0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 8, "threads": 512, "smem": 64 * 1024, "ms": 1.1}, body, setup)
