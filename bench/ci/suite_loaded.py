"""The README's test command with the CPU busy (issue 29.4): SPINNERS busy processes beside it, RUNS times in a row,
in the repository as it is committed (run it from a detached worktree of the commit). One JSON record per run, as
bench/results/test-suite-loaded-cpu-*.json were, and the first failure stops the series.

usage: python bench/ci/suite_loaded.py --out-prefix bench/results/test-suite-loaded-cpu-DATE [--runs 3] [--spinners 2]
       python bench/ci/suite_loaded.py --derive RECORD.json...   (add pytest's own time, from its summary line)
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

from ccoverlap.gpu.provenance import source_commit
from ccoverlap.util.output import write_json

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "pytest", "-q", "-n", "auto", "-p", "no:cacheprovider"]


def _spin() -> None:
    while True:
        pass


def pytest_seconds(summary: str) -> float | None:
    """pytest's own wall time, from its summary line ("... in 228.22s (0:03:48)")."""
    m = re.search(r" in ([\d.]+)s", summary)
    return float(m[1]) if m else None


def one(spinners: int) -> dict:
    """One run of the suite beside `spinners` busy processes: its summary, wall time, load before and after."""
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(spinners)]
    for s in busy:
        s.start()
    try:
        load, t0 = os.getloadavg()[0], time.monotonic()
        run = subprocess.run(COMMAND, cwd=ROOT, capture_output=True, text=True,
                             env=os.environ | {"PYTHONPATH": str(ROOT / "src")})
        wall = time.monotonic() - t0
    finally:
        for s in busy:
            s.terminate()
    lines = run.stdout.strip().splitlines()
    summary = lines[-1] if lines else run.stderr[-300:]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary)}
    return {"summary": summary, "pytest_wall_s": pytest_seconds(summary), "passed": counts.get("passed", 0),
            "failed": counts.get("failed", 0),
            "exit": run.returncode, "wall_s": wall, "load_at_start": load, "load_at_end": os.getloadavg()[0],
            "max_rss_kb_of_the_children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
            "log_tail": lines[-8:]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("--derive", nargs="+", type=Path, help="records to add pytest's own time to, and stop")
    p.add_argument("--out-prefix")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--spinners", type=int, default=2)
    args = p.parse_args()
    if args.derive:
        for path in args.derive:
            doc = json.loads(path.read_text())
            path.write_text(json.dumps(doc | {"pytest_wall_s": pytest_seconds(doc["summary"])}, indent=1) + "\n")
        return 0
    if not args.out_prefix:
        p.error("--out-prefix is needed (or --derive)")
    for n in range(1, args.runs + 1):
        got = one(args.spinners)
        doc = {"what": f"the README's test command with the CPU busy: {args.spinners} spinning Python processes "
                       f"beside it, run {n} of {args.runs} in a row (issue 29.4)",
               "provenance": {"machine": f"{platform.machine()}, {os.cpu_count()} cores",
                              "python": platform.python_version(), "commit": source_commit(),
                              "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
                              "suite_command": "PYTHONPATH=src " + " ".join(["python", *COMMAND[1:]])},
               **got}
        out = write_json(f"{args.out_prefix}-{n}.json", doc, indent=1)  # its folder made, whole or not at all
        print(f"run {n}: {got['summary']} ({got['wall_s']:.0f} s): {out}", flush=True)
        if got["exit"] != 0:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
