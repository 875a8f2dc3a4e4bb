"""Known answer (a), carveout: a 0.3 ms compute kernel, then a 3 ms one of the same name and launch shape (one
128-thread block per SM, no shared memory); the collective (16 CTAs x 256 threads, 82 KB of dynamic shared memory,
1 ms) waits for the first on its own stream and cannot start beside the second: those SMs took the shared-memory
configuration of a kernel without shared memory (docs/occupancy.md, the carveout rule). The optimizer waits for the
collective. Truth: the collective waits the 3 ms kernel out; beside it, the step is 1 ms shorter. The carveout hint
on the compute kernels (carveout-hint) lets it in."""
from common import main


def body(ctx, grad):
    ctx.compute("known_compute", 132, 128, 300)
    ctx.comm.all_reduce(grad, ctx.mark())
    ctx.compute("known_compute", 132, 128, 3000)  # same name, same shape, ten times the work
    ctx.join(ctx.comm.stream)


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 256, "smem": 82 * 1024, "ms": 1.0}, body)
