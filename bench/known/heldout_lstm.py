"""Held out (written 2026-12-07, before any result of this program; nothing fitted to it), a recurrent layer: a
two-layer cuDNN LSTM (1024 in, 1024 hidden, batch 64, 96 time steps, fp32) forward and its backward to the weights;
the collective (24 CTAs x 544 threads, 68 KB, as NCCL's ring Simple launches it; 1 ms) ready after the forward,
and the step's end needs it. The value the loss adds is the forward's (cuDNN's weight gradients may sum in any
order). What it realizes is measured, not constructed."""
import torch

from common import main

IN, HIDDEN, LAYERS, BATCH, SEQ = 1024, 1024, 2, 64, 96


def setup(ctx):
    torch.manual_seed(42)
    ctx.lstm = torch.nn.LSTM(IN, HIDDEN, LAYERS, batch_first=True).cuda()
    g = torch.Generator(device="cuda").manual_seed(42)
    ctx.x = torch.randn(BATCH, SEQ, IN, device="cuda", generator=g)


def body(ctx, grad):
    out, _ = ctx.lstm(ctx.x)
    ctx.comm.all_reduce(grad, ctx.mark())
    torch.autograd.grad(out.square().mean(), list(ctx.lstm.parameters()))
    ctx.join(ctx.comm.stream)
    return out[0, 0, :8].detach().mean() * 1e-3


if __name__ == "__main__":
    main(__doc__, {"ctas": 24, "threads": 544, "smem": 68 * 1024, "ms": 1.0}, body, setup)
