"""Held out (written 2026-12-06 after the what-if's model was changed at 362439d; nothing fitted to it), a
convolution layer: cuDNN bf16 conv2d (64 x 256 x 56 x 56 by 256 x 256 x 3 x 3), batch norm, ReLU, twice; the
collective (24 CTAs x 640 threads, 82 KB; 1 ms), ready after the first convolution, and the second batch norm's
output needs it. What it realizes is measured, not constructed."""
import torch

from common import main


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(7)
    ctx.x = torch.randn(64, 256, 56, 56, device="cuda", dtype=torch.bfloat16, generator=g)
    ctx.w1, ctx.w2 = (torch.randn(256, 256, 3, 3, device="cuda", dtype=torch.bfloat16, generator=g) / 48
                      for _ in range(2))


def body(ctx, grad):
    f = torch.nn.functional
    h = f.conv2d(ctx.x, ctx.w1, padding=1)
    ctx.comm.all_reduce(grad, ctx.mark())
    h = f.relu(f.batch_norm(h, None, None, training=True))
    h = f.conv2d(h, ctx.w2, padding=1)
    h = f.relu(f.batch_norm(h, None, None, training=True))
    ctx.join(ctx.comm.stream)
    return h[0, 0, 0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 24, "threads": 640, "smem": 82 * 1024, "ms": 1.0}, body, setup)
