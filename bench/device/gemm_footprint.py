"""What a cuBLAS bf16 8192^3 GEMM launches on this GPU (from a torch.profiler trace), and whether NCCL's
AllReduce CTA fits beside it by the occupancy model: the evidence for the persistent-gemm lever case.

usage: python bench/device/gemm_footprint.py OUT.json
"""
from __future__ import annotations

import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import get_device
from ccoverlap.model.nccl import OBSERVED_LAUNCHES
from ccoverlap.model.occupancy import beside, occupancy

a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
for _ in range(3):
    a @ b
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    a @ b
    torch.cuda.synchronize()
device = get_device("cuda")
comm = OBSERVED_LAUNCHES["allreduce"]
trace = "/tmp/gemm_trace.json"
prof.export_chrome_trace(trace)
kernels = [e for e in json.load(open(trace))["traceEvents"] if e.get("cat") == "kernel"]
rows = []
for e in kernels:
    fp = KernelFootprint.from_trace_event(e)
    occ = occupancy(device, fp)
    b = beside(device, fp, comm)
    rows.append({"name": e["name"], "dur_us": e["dur"], "grid": e["args"].get("grid"), "block": e["args"].get("block"),
                 "registers": fp.regs, "smem": fp.smem, "cluster": fp.cluster, "blocks_per_sm": occ.blocks,
                 "limiting": [r.value for r in occ.limiting], "comm_fits_beside": b.fits, "blocking": b.blocking,
                 "sm_config": b.config, "comm_needs": b.comm_needs})
from ccoverlap import provenance  # noqa: E402

json.dump({"provenance": provenance.collect(), "device": device.name, "comm": vars(comm), "kernels": rows},
          open(sys.argv[1], "w"), indent=1, default=str)
print(json.dumps(rows, indent=1, default=str))
