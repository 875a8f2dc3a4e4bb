"""Where does a grid's dispatch put its CTAs when it follows another grid's tail? The shape probe
(shape-probe-2026-12-07-h100.json) found heldout_index_add's one-wave atomic kernel (1,056 CTAs of 128 threads,
8 per SM) 20% longer only where the kernel before it was padded too. If CTAs of the second grid pile onto the SMs
the first grid's tail left free (up to its own occupancy) rather than 8 on each, the SMs holding more finish later.
Each case launches A (8,192 CTAs x 128 threads, spinning `A_US`) then B (1,056 CTAs x 128 threads, spinning
`B_US`, each CTA writing its SM id) on one stream (or B alone), A and B each with no dynamic shared memory or the
pad the interposer's auto plan gave the real kernels (15,617 and 16,897 B); per case B's CTAs per SM (the most, the
least on an SM used, the SMs used, how many SMs held each count) and the pair's time by CUDA events, warm-up then
20 repetitions.

  python bench/device/dispatch_packing.py OUT.json
"""
from __future__ import annotations

import statistics
import sys

SRC = r"""
extern "C" __global__ void spin(unsigned* smid, long long cycles) {
    extern __shared__ char pad[];
    unsigned id; asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    if (threadIdx.x == 0 && smid) smid[blockIdx.x] = id;
    if (threadIdx.x == 0 && cycles < 0) pad[0] = 1;  /* keep the pad */
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}
"""
A_GRID, B_GRID, THREADS = 8192, 1056, 128
A_PAD, B_PAD = 15617, 16897
A_US, B_US = 2.0, 200.0
REPS, WARMUP = 20, 3


def main(out: str) -> None:
    import cupy as cp

    from ccoverlap.gpu import provenance
    from ccoverlap.util.output import write_json

    kernel = cp.RawKernel(SRC, "spin")
    rate = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrClockRate, 0) * 1e3  # Hz
    sms = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrMultiProcessorCount, 0)
    smid = cp.zeros(B_GRID, dtype=cp.uint32)
    null = cp.uint64(0)
    cases = {}
    for a_pad in (None, 0, A_PAD):
        for b_pad in (0, B_PAD):
            times, hist = [], []
            for rep in range(WARMUP + REPS):
                smid.fill(0xFFFFFFFF)
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                if a_pad is not None:
                    kernel((A_GRID,), (THREADS,), (null, cp.int64(A_US * rate / 1e6)), shared_mem=a_pad)
                kernel((B_GRID,), (THREADS,), (smid, cp.int64(B_US * rate / 1e6)), shared_mem=b_pad)
                end.record()
                end.synchronize()
                if rep >= WARMUP:
                    times.append(cp.cuda.get_elapsed_time(start, end))
                    used = [c for c in cp.bincount(smid.astype(cp.int64)).get().tolist() if c]
                    hist.append({"max": max(used), "min_used": min(used), "sms_used": len(used),
                                 "spread": {str(n): used.count(n) for n in sorted(set(used))}})
            name = f"A pad {a_pad} / B pad {b_pad}" if a_pad is not None else f"no A / B pad {b_pad}"
            cases[name] = {"a_pad": a_pad, "b_pad": b_pad, "pair_ms": times, "median_ms": statistics.median(times),
                           "b_ctas_per_sm": hist}
            print(name, f"pair median {statistics.median(times):.3f} ms (min {min(times):.3f}, max {max(times):.3f});"
                  f" B's CTAs per SM: max {max(h['max'] for h in hist)}, "
                  f"least on a used SM {min(h['min_used'] for h in hist)}, "
                  f"SMs used {min(h['sms_used'] for h in hist)}-{max(h['sms_used'] for h in hist)}", flush=True)
    write_json(out, {"what": __doc__, "provenance": provenance.collect(), "sms": sms, "clock_hz": rate,
                     "a": {"grid": A_GRID, "threads": THREADS, "spin_us": A_US},
                     "b": {"grid": B_GRID, "threads": THREADS, "spin_us": B_US}, "cases": cases})


if __name__ == "__main__":
    main(sys.argv[1])
