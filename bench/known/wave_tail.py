"""Known answer (h), wave tail: the collective (24 CTAs x 544 threads, 82 KB, 1 ms) becomes ready at once and its
CTAs take 24 SMs while a 0.1 ms one-block kernel runs; then a cuBLAS bf16 GEMM (8192^3: one CTA of 384 threads x
168 registers and ~200 KB on each of the 132 SMs, one full wave) becomes ready. Its blocks cannot share an SM with
a CTA, so 24 of them wait for the CTAs to end: the GEMM spills into a second wave (the forum's FSDP complaint,
NOTES "Compute slowed beside communication"). The next GEMM needs the collective. Truth: the GEMM runs longer
beside the collective than alone; its cost in the step is measured here by CUDA events (the GEMM beside, the
collective's end, the GEMM alone in setup: spans_ms and notes in --json); fewer or smaller CTAs stretch the
collective (its CTAs each take longer for their share), so no lever is expected to net a gain: the doctor must
name the wave tail and its cost, and nothing a lever can do, unless a lever realizes one."""
import torch

from common import main

SIZE = 8192
ALONE_REPS = 10


def setup(ctx):
    g = torch.Generator(device="cuda").manual_seed(1)
    ctx.a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16, generator=g)
    ctx.b = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16, generator=g)
    times = []
    for _ in range(ALONE_REPS + 2):  # the GEMM alone: the median of ALONE_REPS after two warm-ups, timed as in the
        torch.cuda.synchronize()  # step (queued behind the one-block kernel: no launch latency in its span)
        ctx.compute("known_compute", 1, 128, 100)
        start = ctx.timed()
        ctx.a @ ctx.b
        end = ctx.timed()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ctx.notes["gemm_alone_ms"] = sorted(times[2:])[ALONE_REPS // 2]


def body(ctx, grad):
    ctx.comm.all_reduce(grad, ctx.mark())  # ready now: its CTAs take free SMs beside the one-block kernel
    ctx.compute("known_compute", 1, 128, 100)
    start = ctx.timed()
    c = ctx.a @ ctx.b
    ctx.span("gemm", start, ctx.timed())
    ctx.span("comm_end", start, ctx.timed(ctx.comm.stream))  # recorded after the collective on its stream
    ctx.join(ctx.comm.stream)
    c = c @ ctx.b  # needs the collective's result (in the program's story): after it
    return c[0, :8].float().mean()


if __name__ == "__main__":
    main(__doc__, {"ctas": 24, "threads": 544, "smem": 82 * 1024, "ms": 1.0}, body, setup)
