"""The interposer's test modules run again and again with the CPU busy (issue 29.4): pytest sessions of REPS
copies of the modules each (--keep-duplicates: the fake driver built once a session), until --minutes run out, a
run fails or --runs copies have passed; SPINNERS busy processes beside them. Writes a JSON record with provenance
and every session's outcome.

usage: python bench/ci/interposer_loop.py --out bench/results/interposer-loop-cpu-DATE.json [--minutes M]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from ccoverlap.gpu.provenance import source_commit

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["tests/test_interposer.py", "tests/test_interposer_carveout.py", "tests/test_interposer_gating.py",
           "tests/test_interposer_keep.py", "tests/test_interposer_policy.py", "tests/test_interposer_serialize.py"]


def _spin() -> None:
    while True:
        pass


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--reps", type=int, default=5, help="copies of the modules per pytest session")
    p.add_argument("--spinners", type=int, default=2)
    p.add_argument("--runs", type=int, default=0, help="stop once this many copies have passed in a row (0: no stop)")
    args = p.parse_args()
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.spinners)]
    for s in spinners:
        s.start()
    sessions, end = [], time.monotonic() + 60 * args.minutes
    try:
        while time.monotonic() < end and not (args.runs and sum(s["copies"] for s in sessions) >= args.runs):
            t0, load = time.monotonic(), os.getloadavg()[0]
            run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--keep-duplicates",
                                  *MODULES * args.reps], cwd=ROOT, capture_output=True, text=True)
            tail = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-300:]
            sessions.append({"copies": args.reps, "exit": run.returncode, "summary": tail, "load_at_start": load,
                             "wall_s": time.monotonic() - t0})
            print(f"session {len(sessions)}: exit {run.returncode}: {tail}", flush=True)
            if run.returncode != 0:
                sessions[-1]["output_tail"] = run.stdout[-6000:]
                break
    finally:
        for s in spinners:
            s.terminate()
    passed = sum(s["copies"] for s in sessions if s["exit"] == 0)
    doc = {"what": "the interposer's test modules (" + ", ".join(MODULES) + ") run again and again, "
                   f"{args.spinners} spinning processes beside them",
           "provenance": {"machine": f"{platform.machine()}, {os.cpu_count()} cores",
                          "python": platform.python_version(), "commit": source_commit(),
                          "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])},
           "module_runs_passed_in_a_row": passed, "failed": any(s["exit"] != 0 for s in sessions),
           "sessions": sessions}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{passed} module runs passed in a row; {args.out}")
    return 1 if doc["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
