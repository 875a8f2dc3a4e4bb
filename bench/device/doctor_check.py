"""The doctor's targets on GPUs (issue 13, item 4): steps outside the profiled window within 2% of the same
program without the doctor, and identical losses.

    python bench/device/doctor_check.py --out DIR [--nproc 2] [--runs 3]

Runs bench/device/doctor_train.py (DDP on NCCL) under torchrun, alternately alone and under `ccoverlap doctor`
(--runs times each, so drift of the machine falls on both alike), and compares, on the program's own clock
(which both runs have), the steps the doctor's record marks outside its window, leaving out the first
--settle steps of every run (NCCL's and cuBLAS's start-up). Losses are compared exactly (float.hex), per rank
and step, between every run. Writes DIR/doctor-check.json (with provenance) and prints the verdict; the
doctor's own output (traces, JSON, the report of the first run) stays in DIR/doctor<i>/.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

from ccoverlap.gpu import provenance
from ccoverlap.doctor import record

TRAIN = Path(__file__).with_name("doctor_train.py")
LINE = re.compile(r"^rank (\d+) step (\d+) loss (\S+) ms ([\d.]+)$")
TARGET = 1.02


def parse(stdout: str) -> dict[tuple[int, int], tuple[str, float]]:
    """(rank, step) -> (loss as float.hex, ms on the program's clock)."""
    return {(int(m[1]), int(m[2])): (m[3], float(m[4])) for line in stdout.splitlines() if (m := LINE.match(line))}


def run(cmd: list[str], log: Path) -> dict[tuple[int, int], tuple[str, float]]:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    log.write_text(out.stdout + out.stderr)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit code {out.returncode}; see {log}")
    return parse(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3, help="runs of each kind, alternated")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--skip", type=int, default=20, help="the doctor's --skip")
    ap.add_argument("--window", type=int, default=4, help="the doctor's --steps")
    ap.add_argument("--settle", type=int, default=5, help="first steps of every run left out of the times")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    program = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc),
               str(TRAIN), "--steps", str(args.steps)]
    plain, doctored, outside = [], [], None
    for i in range(args.runs):
        plain.append(run(program, args.out / f"plain{i}.log"))
        folder = args.out / f"doctor{i}"
        report = ["--report", str(args.out / "doctor0.html")] if i == 0 else []
        doctored.append(run([sys.executable, "-m", "ccoverlap", "doctor", "--out", str(folder),
                             "--skip", str(args.skip), "--steps", str(args.window),
                             "--json", str(args.out / f"doctor{i}.json"), *report, "--",
                             *program], args.out / f"doctor{i}.log"))
        records, bad = record.read_all(folder)
        if bad or len(records) != args.nproc:
            sys.exit(f"{folder}: {len(records)} step record(s) of {args.nproc}, unreadable: {bad}")
        marks = {(r.rank, s.step) for r in records for s in r.steps if s.outside and s.step > args.settle}
        if outside is not None and marks != outside:
            sys.exit(f"{folder}: another window than the first run's")
        outside = marks

    def median_ms(runs: list[dict], steps: set) -> list[float]:
        return [statistics.median(ms for key, (_, ms) in r.items() if key in steps) for r in runs]

    window = {(r, s) for r in range(args.nproc) for s in range(args.skip, args.skip + args.window + 1)}
    plain_ms, doctor_ms = median_ms(plain, outside), median_ms(doctored, outside)
    ratio = statistics.median(doctor_ms) / statistics.median(plain_ms)
    losses = [{key: loss for key, (loss, _) in r.items()} for r in plain + doctored]
    result = {
        "provenance": provenance.collect(),
        "config": {k: str(v) for k, v in vars(args).items()},
        "outside_steps_per_rank": len(outside) // args.nproc,
        "plain_median_ms": plain_ms, "doctor_median_ms": doctor_ms,
        "outside_ratio": ratio, "outside_within_target": ratio <= TARGET,
        "window_ratio": statistics.median(median_ms(doctored, window)) / statistics.median(median_ms(plain, window)),
        "plain_losses_identical": all(x == losses[0] for x in losses[:args.runs]),
        "doctor_losses_identical_to_plain": all(x == losses[0] for x in losses[args.runs:]),
        "steps_per_run": [len(x) for x in losses],
    }
    (args.out / "doctor-check.json").write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps({k: v for k, v in result.items() if k != "provenance"}, indent=2))
    print(f"outside the window: doctor / plain = {ratio:.4f} (target <= {TARGET}); losses identical: "
          f"{result['doctor_losses_identical_to_plain']} (plain runs among themselves: "
          f"{result['plain_losses_identical']})")


if __name__ == "__main__":
    main()
