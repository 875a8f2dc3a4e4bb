"""Known answer (g), atypical first steps: the threads program (a collective that fits beside none of a 20-wave
grid's 1024-thread blocks, priority realizes about 1 ms), except that in steps 6 and 7 (the first two a doctor
with --skip 5 profiles) the host sleeps 3 ms between the first kernel and the grid: those steps are host-bound,
their GPU idle, their collective's wait another. Truth: the typical step's gain is the threads program's (~1 ms,
priority); a sum or a first step would dilute it. The doctor must name steps 6 and 7 and leave them out."""
import time

from common import main

SLOW = {6, 7}  # 1-based optimizer steps
seen = [0]


def body(ctx, grad):
    seen[0] += 1
    ctx.compute("known_compute", 132, 128, 100)
    first = ctx.mark()
    if seen[0] in SLOW:
        time.sleep(0.003)
    ctx.compute("known_wide", 132 * 2 * 20, 1024, 100)
    ctx.comm.all_reduce(grad, first)  # launched after the grid: no record between the mark and this wait
    ctx.join(ctx.comm.stream)


if __name__ == "__main__":
    main(__doc__, {"ctas": 16, "threads": 512, "smem": 16 * 1024, "ms": 1.0}, body)
