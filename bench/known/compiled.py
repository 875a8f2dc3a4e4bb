"""Known answer (i), torch.compile: a small MLP compiled with torch.compile (default mode: Triton kernels; the
`graphs` variant, compiled_graphs.py: mode="reduce-overhead", CUDA graphs) on the compute stream, beside the
collective (16 CTAs x 256 threads, 16 KB, 1 ms) on its side stream, launched first. What it checks: the program
runs unmodified under `ccoverlap doctor` and its alone window matches its launches (the issue's target: >= 95%);
the doctor's verdict is recorded, not constructed."""
import os

import torch

from common import main

MODE = os.environ.get("KNOWN_COMPILE_MODE", "default")
WIDTH, BATCH, LAYERS = 2048, 4096, 4


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(1)
    ctx.x = torch.randn(BATCH, WIDTH, device="cuda", dtype=torch.bfloat16, generator=g)
    ctx.ws = [torch.randn(WIDTH, WIDTH, device="cuda", dtype=torch.bfloat16, generator=g) / WIDTH ** 0.5
              for _ in range(LAYERS)]

    def mlp(x, ws):
        for w in ws:
            x = torch.nn.functional.gelu(x @ w) * 0.5 + x
        return x

    ctx.mlp = torch.compile(mlp, mode=None if MODE == "default" else MODE)


def body(ctx, grad):
    ctx.comm.all_reduce(grad, ctx.mark())
    y = ctx.mlp(ctx.x, ctx.ws)
    ctx.join(ctx.comm.stream)
    return y[0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 256, "smem": 16 * 1024, "ms": 1.0}, body, setup)
