"""Is the bench's default model GPU-bound on this GPU? Per workload (emulated 8 ranks, 280 GB/s) and batch: step
time by CUDA events (median, min, max of 10), host CPU seconds per step, and how the step scales with the batch
(GPU-bound: ~linear; host-bound: flat, CPU time ~ step time). Writes $OUT/gpu-bound.json with provenance.
usage: python bench/device/gpu_bound.py OUT.json [batch ...]"""
import json
import sys
import time
from dataclasses import replace

import torch

from ccoverlap.gpu import provenance
from ccoverlap.util import timing
from ccoverlap.bench import catalog
from ccoverlap.bench.config import FULL, BenchConfig

out, batches = sys.argv[1], [int(b) for b in sys.argv[2:]] or [8, 16, 32]
cfg = BenchConfig(comm="emulate", device="cuda", nproc=1, gpus=1, workloads=("ddp", "fsdp", "tp", "moe", "diloco"))
device, rank, world = cfg.comm_backend.init(cfg)
rows = []
for name in cfg.workloads:
    for batch in batches:
        c = replace(cfg, size=replace(FULL, batch=batch))
        try:
            w = catalog.BY_NAME[name].builder(c, rank, world, device, False)
            timing.timed(w.run_step, 0, 3, cuda=True, drain=not w.background)  # as the bench times it
            cpu0, wall0 = time.process_time(), time.perf_counter()
            samples = timing.timed(w.run_step, 10, 0, cuda=True, drain=not w.background)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            row = {"workload": name, "batch": batch, "samples_ms": samples, **timing.summary(samples),
                   "cpu_s_per_step": cpu / 10, "wall_s_per_step": wall / 10, **w.counters()}
        except Exception as exc:  # noqa: BLE001
            row = {"workload": name, "batch": batch, "error": f"{type(exc).__name__}: {exc}"[:300]}
        print(json.dumps({k: v for k, v in row.items() if k != "samples_ms"}), flush=True)
        rows.append(row)
        del w
        torch.cuda.empty_cache()
json.dump({"provenance": provenance.collect(backend="ccov_emulate", world_size=8), "emulate_world": 8,
           "busbw_gbps": cfg.busbw_gbps, "model": vars(FULL), "rows": rows}, open(out, "w"), indent=1)
