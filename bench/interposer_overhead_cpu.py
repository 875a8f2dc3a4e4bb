"""The interposer's own CPU cost per cached launch, on the fake driver of the tests (no GPU).

usage: python bench/interposer_overhead_cpu.py [--out bench/results/interposer-overhead-cpu-fake.json]

Alternates unintercepted, interposed with mode off, and interposed padding runs of the
launcher's `bench` (cuLaunchKernel_ptsz of a CUkernel handle), one process each, and
records the medians with provenance. The GPU figure comes from bench/device/interposer_gpu.sh.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from fake_gpu.build import build  # noqa: E402

from ccoverlap.gpu import provenance  # noqa: E402
from ccoverlap.control.interposer import library_path  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/results/interposer-overhead-cpu-fake.json")
    parser.add_argument("--launches", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    launcher = build(Path(tempfile.mkdtemp(prefix="ccov-fake-")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CCOVERLAP_") and k != "LD_PRELOAD"}
    configs = {
        "unintercepted": {},
        "interposed_off": {"LD_PRELOAD": library_path(), "CCOVERLAP_MODE": "off"},
        "interposed_pad": {"LD_PRELOAD": library_path(), "CCOVERLAP_PAD_BYTES": "256"},
    }
    times: dict[str, list[float]] = {k: [] for k in configs}
    for _ in range(args.rounds):
        for name, extra in configs.items():
            out = subprocess.run([launcher, "bench", str(args.launches), str(args.reps)], env=env | extra,
                                 capture_output=True, text=True, check=True)
            times[name].append(json.loads(out.stdout)["ns_per_launch"])
    medians = {k: statistics.median(v) for k, v in times.items()}
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), None)
    record = provenance.collect(
        experiment="interposer-overhead-fake-driver",
        method=f"tests/fake_gpu/launcher.c 'bench {args.launches} {args.reps}': cuLaunchKernel_ptsz of a CUkernel "
               f"handle on the fake libcuda; median of {args.reps} reps per process, {args.rounds} processes per "
               "configuration, alternating. The interposer's own CPU cost per cached launch, not the driver's",
        cpu=cpu,
        ns_per_launch=times,
        median_ns=medians,
        overhead_median_ns={k: round(medians[k] - medians["unintercepted"], 2)
                            for k in ("interposed_off", "interposed_pad")},
    )
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({"median_ns": medians, "overhead_median_ns": record["overhead_median_ns"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
