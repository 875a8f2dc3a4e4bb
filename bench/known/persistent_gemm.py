"""Known answer (e), persistent GEMM: a 0.1 ms kernel, then a cuBLAS bf16 GEMM (8192^3: Hopper's persistent kernel,
one CTA with most of an SM's shared memory and registers on every SM); the collective (16 CTAs x 640 threads,
82 KB, 1 ms), ready after the first kernel, fits beside none of its CTAs, and the next GEMM needs its result.
Truth: the collective waits the GEMM out; only an SM partition would make room beside it (cuBLAS sizes its grid
for every SM; sm-carveout does not reach these kernels on torch 2.11 / CUDA 13): nothing a scheduling lever can do."""
import torch

from common import main

SIZE = 8192


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(1)
    ctx.a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16, generator=g)
    ctx.b = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16, generator=g)


def body(ctx, grad):
    ctx.compute("known_compute", 132, 128, 100)
    first = ctx.mark()
    c = ctx.a @ ctx.b
    ctx.comm.all_reduce(grad, first)
    ctx.join(ctx.comm.stream)
    c = c @ ctx.b  # needs the collective's result (in the program's story): after it
    return c[0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 640, "smem": 82 * 1024, "ms": 1.0}, body, setup)
