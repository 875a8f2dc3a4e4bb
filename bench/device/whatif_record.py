"""What the what-if simulator needs of the lab's cases, recorded on the GPU (issue 23; bench/device/whatif.sh).

`ccoverlap lab --quick` gives the measured cells (totals, comm completion, comm block timelines). This adds, per
compute family, a profiler trace of the compute phase alone (each launch's footprint, grid and alone time, read
later through the doctor's trace reader) and, for the nccl proxy, its time alone at several CTA and thread counts
(what the comm bandwidth model of `ccoverlap.whatif.calibration` is fitted to). Writes OUT/whatif-capture.json and
OUT/traces/<family>.json.gz.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from ccoverlap.gpu import provenance
from ccoverlap.lab import workloads
from ccoverlap.lab.config import QUICK, LabConfig
from ccoverlap.lab.runner import Lab, Setup
from ccoverlap.model.limits import get_device
from ccoverlap.util import profiling
from ccoverlap.util.output import write_json
from ccoverlap.util.timing import summary

#: the nccl proxy's shapes timed alone: CTAs x threads (640: NCCL's default; 288: NCCL_NTHREADS=256 + a sync warp)
SWEEP_CTAS = (1, 2, 4, 8, 16, 32)
SWEEP_THREADS = (640, 288)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    cfg = LabConfig(**QUICK).validate()
    device = get_device("cuda")
    lab = Lab(cfg, device)
    base = (lab.compute_stream, lab.comm_streams[False])
    traces = {}
    for family in cfg.computes:
        t0 = time.time()
        phase = lab.phase(family)
        path = args.out / "traces" / f"{family}.json.gz"
        profiling.record(lambda: lab._rep(phase, None, base, Setup(), "with"), path, cuda=True, warmup=1, active=3)
        alone = lab._measure(lambda: lab._rep(phase, None, base, Setup(), "with"))
        traces[family] = {"trace": str(path.relative_to(args.out)),
                          "compute_alone_ms": summary(alone["compute_ms"])["median"],
                          "footprint": vars(phase.footprint) if phase.footprint else None,
                          "seconds": round(time.time() - t0, 1)}
        print(f"{family}: traced in {traces[family]['seconds']} s, "
              f"alone {traces[family]['compute_alone_ms']:.3f} ms", flush=True)
    sweep = []
    for name in cfg.comms:
        proxy = lab.proxy(name)
        fp = proxy.footprint()
        for threads in SWEEP_THREADS:
            for ctas in SWEEP_CTAS:
                shape = workloads.CommShape(threads, ctas, 1)
                m = lab._measure(lambda: lab._rep(None, proxy, base, Setup(comm=shape), "with"))
                sweep.append({"comm": name, "threads": threads, "ctas": ctas, "nbytes": proxy.nbytes,
                              "regs": fp.regs, "static_smem": fp.static_smem, "dynamic_smem": fp.dynamic_smem,
                              "alone_ms": summary(m["comm_done_ms"])["median"]})
                print(f"{name} {ctas} x {threads}: {sweep[-1]['alone_ms']:.3f} ms", flush=True)
    write_json(args.out / "whatif-capture.json", {
        "provenance": provenance.collect(device_limits=device.to_dict()), "config": vars(cfg),
        "families": traces, "comm_sweep": sweep})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
