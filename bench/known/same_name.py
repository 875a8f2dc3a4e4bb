"""Known answer (d), nothing to gain: the carveout program with a collective that needs no shared memory (it copies
directly): it starts beside the 3 ms kernel of the same name and launch shape as the 0.3 ms one, and ends long
before it. Truth: nothing to gain (the step is the compute); two launches of one shape doing different work are
not a slowdown."""
from common import main


def body(ctx, grad):
    ctx.compute("known_compute", 132, 128, 300)
    ctx.comm.all_reduce(grad, ctx.mark())
    ctx.compute("known_compute", 132, 128, 3000)
    ctx.join(ctx.comm.stream)


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 256, "smem": 0, "ms": 1.0}, body)
