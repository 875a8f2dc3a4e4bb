"""Held out (written 2026-12-07, before any result of this program; nothing fitted to it), a U-Net decoder block:
bilinear upsampling of 16 x 128 x 64 x 64 bf16 features to 128 x 128, concatenated with a skip connection, a 3 x 3
convolution (cuDNN) and ReLU, forward then the gradients of the features and the skip (the upsampling's backward
sums by atomics); the collective (12 CTAs x 384 threads, 32 KB of shared memory; 0.9 ms) ready after the
upsampling, and the step's end needs it. What it realizes is measured, not constructed."""
import torch

from common import main

BATCH, CHANNELS, SIDE = 16, 128, 64


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(91)
    ctx.x = torch.randn(BATCH, CHANNELS, SIDE, SIDE, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    ctx.skip = torch.randn(BATCH, CHANNELS, 2 * SIDE, 2 * SIDE, device="cuda", dtype=torch.bfloat16,
                           generator=g).requires_grad_()
    ctx.w = torch.randn(CHANNELS, 2 * CHANNELS, 3, 3, device="cuda", dtype=torch.bfloat16, generator=g) / 48.0


def body(ctx, grad):
    up = torch.nn.functional.interpolate(ctx.x, scale_factor=2, mode="bilinear", align_corners=False)
    ctx.comm.all_reduce(grad, ctx.mark())
    h = torch.relu(torch.nn.functional.conv2d(torch.cat([up, ctx.skip], dim=1), ctx.w, padding=1))
    gx, gs = torch.autograd.grad(h.float().square().mean(), (ctx.x, ctx.skip))
    ctx.join(ctx.comm.stream)
    return gx[0, 0, 0, :8].float().mean() + gs[0, 0, 0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 12, "threads": 384, "smem": 32 * 1024, "ms": 0.9}, body, setup)
