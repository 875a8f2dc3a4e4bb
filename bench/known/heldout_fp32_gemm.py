"""Held out (written 2026-12-06 after the what-if's model was changed at 362439d; nothing fitted to it), fp32
GEMMs (TF32 off: 4096^3, SIMT or non-persistent kernels) with a softmax between them; the collective (16 CTAs x 288
threads, 16 KB, as NCCL_NTHREADS=256 leaves ring Simple; 1 ms) is launched first, ready at once, and the second
GEMM's output needs it. What it realizes is measured, not constructed."""
import torch

from common import main

SIZE = 4096


def setup(ctx):
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(8)
    ctx.a = torch.randn(SIZE, SIZE, device="cuda", generator=g)
    ctx.b = torch.randn(SIZE, SIZE, device="cuda", generator=g) / SIZE ** 0.5


def body(ctx, grad):
    ctx.comm.all_reduce(grad, ctx.mark())
    h = torch.softmax(ctx.a @ ctx.b, dim=-1)
    o = h @ ctx.b
    ctx.join(ctx.comm.stream)
    return o[0, :8].mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 288, "smem": 16 * 1024, "ms": 1.0}, body, setup)
