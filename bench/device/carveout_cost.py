"""What the carveout-hint lever costs the compute it is set on: each lab family alone, with the
preferred shared-memory carveout unset, 60% and 100%, set by the launch interposer on every compute
kernel (`ccoverlap run --carveout P`), CUDA events, warm-up, median of 20 with min and max.

usage: python bench/device/carveout_cost.py OUT.json          (runs itself once per hint, under the interposer)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

HINTS = (None, 60, 100)
FAMILIES = ("fma", "elementwise", "sparse", "gemm", "attention", "transformer")


def measure() -> dict:
    """Every family alone in this process (the interposer, preloaded, sets the hint it was given)."""
    from ccoverlap.lab.config import LabConfig
    from ccoverlap.lab.runner import Lab, Setup
    from ccoverlap.model.limits import get_device
    from ccoverlap.util.timing import summary

    lab = Lab(LabConfig(reps=20, warmup=3), get_device("cuda"))
    streams = (lab.compute_stream, lab.comm_streams[False])
    out = {}
    for name in FAMILIES:
        phase = lab.phase(name)
        samples = lab._measure(lambda: lab._rep(phase, None, streams, Setup(), "with"))["compute_ms"]
        out[name] = {**summary(samples), "samples": samples}
    return out


def main(out_path: str) -> None:
    from ccoverlap.gpu import provenance
    from ccoverlap.util.output import write_json

    runs = {}
    for hint in HINTS:
        stats = f"/tmp/carveout-cost-stats-{hint}.json"
        cmd = [sys.executable, "-m", "ccoverlap", "run", "--mode", "off", "--stats", stats]
        cmd += ["--carveout", str(hint)] if hint is not None else []
        child = subprocess.run([*cmd, "--", sys.executable, __file__, "--child"], capture_output=True, text=True,
                               check=True, env=os.environ | {"PYTHONUNBUFFERED": "1"})
        runs[str(hint)] = {"families": json.loads(child.stdout.strip().splitlines()[-1]),
                           "interposer": json.load(open(stats)) if os.path.exists(stats) else None}
    result = {"provenance": provenance.collect(), "hints": [str(h) for h in HINTS], "runs": runs}
    write_json(out_path, result)
    for name in FAMILIES:
        base = runs["None"]["families"][name]["median"]
        print(name, " ".join(f"{h}: {runs[str(h)]['families'][name]['median']:.3f} ms "
                             f"({runs[str(h)]['families'][name]['median'] / base:.3f}x)"
                             for h in HINTS))


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        print(json.dumps(measure()))
    else:
        main(sys.argv[1])
