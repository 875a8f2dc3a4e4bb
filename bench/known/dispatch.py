"""Known answer (f), dispatch order: a 0.1 ms kernel, then a grid of 20 waves of 256-thread blocks with 100 KB of
shared memory each (two per SM, 0.1 ms each, 2 ms in all); the collective (16 CTAs x 256 threads, 8 KB, 1 ms),
ready after the first kernel, fits beside two of them in every resource. Truth: at equal priority it is not
dispatched until the grid's last wave is (2 ms late); on a high-priority stream it starts at once (priority
realizes about 1 ms)."""
from common import main


def body(ctx, grad):
    ctx.compute("known_compute", 132, 128, 100)
    first = ctx.mark()
    ctx.compute("known_fat", 132 * 2 * 20, 256, 100, smem=100 * 1024)
    ctx.comm.all_reduce(grad, first)  # launched after the grid: no record between the mark and this wait
    ctx.join(ctx.comm.stream)


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 256, "smem": 8 * 1024, "ms": 1.0}, body)
