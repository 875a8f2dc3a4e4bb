"""Why the emulation's paced proxy runs slow at 280 GB/s (the GPU test's 0.487 vs 0.419 ms): its time alone
for an 8-rank all-reduce over sizes x bus bandwidths, with the CTAs it launched; pacing that binds gives
time = ring/busbw, a per-CTA memory limit gives a floor that does not fall with a higher busbw.

  python bench/device/proxy_pace.py OUT.json
"""
from __future__ import annotations

import itertools
import json
import statistics
import sys

import torch

from ccoverlap.bench import emulate
from ccoverlap.bench.proxy import Launch, ProxyMover
from ccoverlap.gpu import provenance

REPS, WARMUP = 15, 3


def time_move(mover: ProxyMover, t: torch.Tensor, queued: bool) -> tuple[list[float], Launch]:
    """Event times of one move; `queued`: a sleep ahead of the start event keeps the host's launch work (Python,
    the driver call) out of the timed span, as in training where the comm stream waits for compute."""
    ring = emulate.ring_bytes("allreduce", t.nbytes, 8)
    shape = mover.emulation.shape("allreduce", t.nbytes)
    launch = Launch.plan(shape, mover.emulation.duration_ns(ring), mover.unroll, ring, t.nbytes)
    times = []
    for i in range(REPS + WARMUP):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if queued:
            with torch.cuda.stream(mover.stream):
                torch.cuda._sleep(2_000_000)
        start.record(mover.stream)
        mover.move(t, t, ring, shape)
        end.record(mover.stream)
        end.synchronize()
        if i >= WARMUP:
            times.append(start.elapsed_time(end))
    return times, launch


def main(out: str) -> None:
    device = torch.device("cuda", 0)
    rows = []
    for busbw in (40.0, 140.0, 280.0, 560.0):
        mover = ProxyMover(emulate.Emulation(world=8, busbw_gbps=busbw), device)
        for mib, queued in itertools.product((16, 64, 256), (False, True)):
            t = torch.randn(mib * 2**18, device=device)  # mib MiB of fp32
            times, launch = time_move(mover, t, queued)
            ring = emulate.ring_bytes("allreduce", t.nbytes, 8)
            target = ring / (busbw * 1e9) * 1e3
            med = statistics.median(times)
            rows.append({"busbw_gbps": busbw, "mib": mib, "queued": queued, "ring_bytes": ring, "target_ms": target,
                         "median_ms": med, "min_ms": min(times), "max_ms": max(times), "ratio": med / target,
                         "ctas": launch.ctas, "threads": launch.threads, "cluster": launch.cluster,
                         "step_ns": launch.step_ns, "samples_ms": times})
            print(f"busbw {busbw:5.0f} GB/s {mib:4d} MiB {'queued' if queued else 'host in span'}: {med:.3f} ms "
                  f"(target {target:.3f}, x{med / target:.3f}) "
                  f"{launch.ctas} CTAs x {launch.threads} thr, cluster {launch.cluster}, step {launch.step_ns} ns",
                  flush=True)
    doc = {"provenance": provenance.collect(),
           "what": "the paced proxy's time alone, 8-rank all-reduce, CUDA events, median of 15 after 3 warm-up; "
                   "queued: a 2M-cycle torch.cuda._sleep ahead of the start event, so the host's launch work is not "
                   "in the span",
           "rows": rows}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
