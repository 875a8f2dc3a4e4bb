"""Known answer (b), threads: a 0.1 ms kernel, then a grid of 20 waves of 1024-thread blocks (two per SM: every
thread slot of every SM, 0.1 ms each, 2 ms in all); the collective (16 CTAs x 512 threads, 16 KB, 1 ms), ready
after the first kernel, fits beside none of its blocks. Truth: at equal priority it starts once the grid's last
wave is dispatched (2 ms late); on a high-priority stream its CTAs take SMs as the first blocks retire (priority
realizes about 1 ms)."""
from common import main


def body(ctx, grad):
    ctx.compute("known_compute", 132, 128, 100)
    first = ctx.mark()
    ctx.compute("known_wide", 132 * 2 * 20, 1024, 100)
    ctx.comm.all_reduce(grad, first)  # launched after the grid: no record between the mark and this wait
    ctx.join(ctx.comm.stream)


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 512, "smem": 16 * 1024, "ms": 1.0}, body)
