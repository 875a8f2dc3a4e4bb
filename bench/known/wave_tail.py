"""Known answer (h), wave tail: after a 0.1 ms kernel, the collective (24 CTAs x 544 threads, 82 KB, 1 ms) and then
a cuBLAS bf16 GEMM (8192^3: one CTA of 384 threads x 168 registers and ~200 KB on each of the 132 SMs, one full
wave) become ready together, the collective launched first; the GEMM's blocks cannot share an SM with a CTA, so
24 of them wait for the CTAs to end (the forum's FSDP complaint, NOTES "Compute slowed beside communication").
The next GEMM needs the collective. Truth: the GEMM runs longer beside the collective than alone (a wave tail by
the occupancy model); fewer or smaller CTAs stretch the collective (its CTAs each take longer for their share), so
no lever is expected to net a gain: the doctor must name the wave tail, its cost, and nothing a lever can do,
unless a lever realizes one."""
import torch

from common import main

SIZE = 8192


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(1)
    ctx.a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16, generator=g)
    ctx.b = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16, generator=g)


def body(ctx, grad):
    ctx.compute("known_compute", 132, 128, 100)
    ctx.comm.all_reduce(grad, ctx.mark())  # launched first: its CTAs are resident when the GEMM starts
    c = ctx.a @ ctx.b
    ctx.join(ctx.comm.stream)
    c = c @ ctx.b  # needs the collective's result (in the program's story): after it
    return c[0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 24, "threads": 544, "smem": 82 * 1024, "ms": 1.0}, body, setup)
