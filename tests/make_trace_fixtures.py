"""Regenerate the synthetic fixture traces in tests/data/traces (deterministic).

usage: python tests/make_trace_fixtures.py

handmade/    two ranks with round numbers (rank 0: overlap 50 %, see test_analysis.py)
strategies/  default and shaping (elementwise kernels padded by 40 KiB), two ranks each,
             nanosecond-resolution times as torch 2.x writes them
bad/         one good trace beside truncated, invalid, kernel-less, duplicate-rank and corrupt-gzip files
The real H200 traces (h200/) come from bench/device/record_traces.py instead.
"""
from __future__ import annotations

import gzip
from pathlib import Path

from kineto_synth import ELEMENTWISE, GEMM, NCCL, K, random_run, write

ROOT = Path(__file__).parent / "data" / "traces"
STEPS = [(0, 1000), (1000, 1000), (2000, 1000)]


def handmade() -> None:
    gemm = dict(block=384, grid=132, regs=168, smem=213504)
    comm = dict(stream=13, block=640, grid=16, regs=96, smem=104832)
    rank0 = [
        K(GEMM, 100, 300, launch_ts=90, **gemm),
        K(NCCL, 300, 400, launch_ts=95, **comm),
        K("Memcpy DtoD (Device -> Device)", 450, 50, cat="gpu_memcpy", launch_ts=96),
        K(ELEMENTWISE, 500, 100, block=256, grid=1024, regs=16, smem=0, launch_ts=97),
        K(ELEMENTWISE, 550, 100, stream=20, block=256, grid=1024, regs=16, smem=40960, launch_ts=98),
        K(NCCL, 1100, 200, launch_ts=1010, **comm),
        K(GEMM, 1250, 250, launch_ts=1020, **gemm),
        K(GEMM, 2100, 400, launch_ts=2010, **gemm),  # launched in the last step: not analysed
    ]
    rank1 = [
        K(GEMM, 120, 200, launch_ts=90, **gemm),
        K(NCCL, 400, 300, launch_ts=95, **comm),
        K("Memset (Device)", 720, 30, cat="gpu_memset", launch_ts=96),
        K(GEMM, 1000, 500, launch_ts=990, **gemm),
        K("ncclSymkDevKernel_AllGather_LL(ncclSymkDevWorkArgs4K)", 1300, 400, launch_ts=1005, **comm),
    ]
    write(ROOT / "handmade" / "rank0_trace.json", 0, 2, rank0, STEPS)
    write(ROOT / "handmade" / "rank1_trace.json.gz", 1, 2, rank1, STEPS)


def strategies() -> None:
    for name, seed, pad in (("default", 10, 0), ("shaping", 20, 40960)):
        for rank in (0, 1):
            kernels, steps = random_run(seed + rank, 4, pad=pad, float_times=True)
            write(ROOT / "strategies" / name / f"rank{rank}_trace.json.gz", rank, 2, kernels, steps, cpu_noise=1)


def bad() -> None:
    folder = ROOT / "bad"
    kernels, steps = random_run(3, 3)
    good = write(folder / "rank0_trace.json", 0, 2, kernels, steps)
    text = good.read_text()
    (folder / "rank1_truncated.json").write_text(text[: len(text) // 2])
    (folder / "notjson.json").write_text("this is not JSON {")
    write(folder / "rank2_nokernels.json", 2, 4, [], steps)
    write(folder / "rank0_trace_copy.json.gz", 0, 2, kernels, steps)
    blob = gzip.compress(text.encode())
    (folder / "rank3_corrupt.json.gz").write_bytes(blob[: len(blob) // 2])


if __name__ == "__main__":
    handmade()
    strategies()
    bad()
