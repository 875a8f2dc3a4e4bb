"""Held out (written 2026-12-07, before any result of this program; nothing fitted to it), an
fp8 projection stack: each step quantizes a bf16 activation (8192 x 4096) to float8_e4m3fn with a per-tensor scale
and runs four fp8 GEMMs (torch._scaled_mm, 8192 x 4096 by 4096 x 4096, bf16 out), each feeding the next; the
collective (16 CTAs x 640 threads, 82 KB, as NCCL's tree/LL128 launches it; 1 ms) is launched first, on the
previous bucket, and the step's end needs it. What it realizes is measured, not constructed."""
import torch

from common import main

ROWS, WIDTH, LAYERS = 8192, 4096, 4


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(41)
    ctx.x = torch.randn(ROWS, WIDTH, device="cuda", dtype=torch.bfloat16, generator=g)
    # _scaled_mm takes its second operand column-major: each weight kept (out, in) and passed transposed
    ctx.w = [(torch.randn(WIDTH, WIDTH, device="cuda", generator=g) / WIDTH ** 0.5).to(torch.float8_e4m3fn)
             for _ in range(LAYERS)]
    ctx.one = torch.ones((), device="cuda")


def body(ctx, grad):
    ctx.comm.all_reduce(grad, ctx.mark())
    h = ctx.x
    for w in ctx.w:
        scale = h.abs().amax().float().clamp(min=1e-6) / 448.0
        q = (h.float() / scale).to(torch.float8_e4m3fn)
        h = torch._scaled_mm(q, w.t(), scale_a=scale, scale_b=ctx.one, out_dtype=torch.bfloat16)
    ctx.join(ctx.comm.stream)
    return h[0, :8].float().mean() * 1e-3


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 640, "smem": 82 * 1024, "ms": 1.0}, body, setup)
