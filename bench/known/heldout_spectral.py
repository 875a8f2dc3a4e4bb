"""Held out (written 2026-12-07, before any result of this program; nothing fitted to it), a Fourier neural
operator's layer: a 2-D real FFT of 8 x 64 x 256 x 256 fp32 fields (cuFFT), a complex mixing of the lowest 32 x 32
modes, the inverse FFT, a 1 x 1 convolution skip and GELU, forward then the input's gradient; the collective
(24 CTAs x 256 threads, 16 KB of shared memory; 1 ms) ready after the forward, and the step's end needs it. What it
realizes is measured, not constructed."""
import torch

from common import main

BATCH, WIDTH, SIDE, MODES = 8, 64, 256, 32


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(81)
    ctx.x = torch.randn(BATCH, WIDTH, SIDE, SIDE, device="cuda", generator=g).requires_grad_()
    scale = 1.0 / WIDTH
    ctx.spectral = torch.complex(torch.randn(WIDTH, WIDTH, MODES, MODES, device="cuda", generator=g),
                                 torch.randn(WIDTH, WIDTH, MODES, MODES, device="cuda", generator=g)) * scale
    ctx.skip = torch.randn(WIDTH, WIDTH, 1, 1, device="cuda", generator=g) * scale


def body(ctx, grad):
    xf = torch.fft.rfft2(ctx.x)
    mixed = torch.einsum("bixy,ioxy->boxy", xf[:, :, :MODES, :MODES], ctx.spectral)
    out_f = torch.nn.functional.pad(mixed, (0, SIDE // 2 + 1 - MODES, 0, SIDE - MODES))
    h = torch.fft.irfft2(out_f, s=(SIDE, SIDE)) + torch.nn.functional.conv2d(ctx.x, ctx.skip)
    y = torch.nn.functional.gelu(h)
    ctx.comm.all_reduce(grad, ctx.mark())
    (g,) = torch.autograd.grad(y.square().mean(), ctx.x)
    ctx.join(ctx.comm.stream)
    return g[0, 0, 0, :8].mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 24, "threads": 256, "smem": 16 * 1024, "ms": 1.0}, body, setup)
