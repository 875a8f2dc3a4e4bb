"""Measure how fast `ccoverlap analyze` parses a large trace, and its peak memory.

Generates a Kineto-shaped trace of about --mb MB (uncompressed JSON; cpu_ops
with shapes around every launch, as real traces have) in a temporary folder,
parses it in a fresh process and prints MB/s (of JSON) and peak RSS; then runs
the rank's whole analysis on the parsed model (metrics, and why each collective
started late: dependency graph, causes, breakdown, ideal replay) and prints its
time and the MB/s of parse plus analysis. The trace is deleted afterwards;
nothing is committed.

usage: python bench/analysis/parse_throughput.py [--mb 300] [--gz]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import kineto_synth  # noqa: E402

PARSE = """
import sys, time
from pathlib import Path
from ccoverlap.analysis.metrics import rank_metrics
from ccoverlap.analysis.reader import read_trace

def hwm():  # this process's peak RSS (ru_maxrss would include the parent's, inherited across exec)
    line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024

base = hwm()
t0 = time.perf_counter()
trace = read_trace(Path(sys.argv[1]))
dt = time.perf_counter() - t0
parsed = hwm()
t0 = time.perf_counter()
rank_metrics("s", trace)
print(dt, len(trace.kernels), base, parsed, time.perf_counter() - t0, hwm())
"""

def generate(path: Path, mb: int, cpu_noise: int) -> None:
    per_step = 3_200 * (1 + cpu_noise)  # bytes of JSON per synthetic step, roughly
    kernels, step_list = kineto_synth.random_run(7, max(1, mb * 1_000_000 // per_step), pad=4096)
    kineto_synth.write(path, 0, 1, kernels, step_list, cpu_noise=cpu_noise)


def json_bytes(path: Path) -> int:
    with gzip.open(path, "rb") as fh:
        return sum(len(chunk) for chunk in iter(lambda: fh.read(1 << 20), b""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--gz", action="store_true", help="write and parse a .json.gz")
    ap.add_argument("--cpu-noise", type=int, default=4, help="cpu_ops per launch (0: kernels only, the densest)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("rank0_trace.json.gz" if args.gz else "rank0_trace.json")
        t0 = time.perf_counter()
        generate(path, args.mb, args.cpu_noise)
        size = json_bytes(path) if args.gz else path.stat().st_size
        print(f"generated {size / 1e6:.0f} MB in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        out = subprocess.run([sys.executable, "-c", PARSE, str(path)], capture_output=True, text=True, check=True)
        seconds, kernels, base, rss, analysis, analysed_rss = out.stdout.split()
        seconds, base, rss, analysis = float(seconds), int(base), int(rss), float(analysis)
        print(json.dumps({
            "json_mb": round(size / 1e6, 1), "file_mb": round(path.stat().st_size / 1e6, 1), "kernels": int(kernels),
            "seconds": round(seconds, 2), "mb_per_s": round(size / 1e6 / seconds, 1),
            "peak_rss_mb": round(rss / 1e6, 1), "rss_before_parse_mb": round(base / 1e6, 1),
            "peak_rss_over_file": round(rss / path.stat().st_size, 3),
            "analysis_seconds": round(analysis, 2),
            "with_analysis_mb_per_s": round(size / 1e6 / (seconds + analysis), 1),
            "peak_rss_with_analysis_mb": round(int(analysed_rss) / 1e6, 1),
            "cpus": os.cpu_count(),
        }))


if __name__ == "__main__":
    main()
