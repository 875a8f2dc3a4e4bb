"""The bench's A/A check on the CPU: `default` against itself (`--strategies default,default`), each in
`--repeats` fresh process sets, in `--runs` separate bench runs; how often `default#2` is "within noise" of
`default` (the target: at least 19 of 20). Two gloo ranks, the tiny model (the CPU preset), one workload.

usage: python bench/aa_cpu.py [--runs 20] [--workload ddp] [--out bench/results/aa-cpu-DATE.json] [-- BENCH OPTIONS]

Each run is one `ccoverlap bench ... --json`, its whole JSON kept in the results (every process set's steps per
rank), with a progress line per run on stderr. Options after `--` go to every bench run (e.g. `--steps 10`).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ccoverlap.gpu import provenance
from ccoverlap.util.output import write_json
from ccoverlap.util.stats import NOISE


def one_run(workload: str, extra: list[str], folder: Path, i: int) -> dict:
    out = folder / f"aa{i:02d}.json"
    cmd = [sys.executable, "-m", "ccoverlap", "bench", "--workload", workload, "--device", "cpu", "--nproc", "2",
           "--strategies", "default,default", *extra, "--json", str(out)]
    started = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench run {i} failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return {"wall_s": time.monotonic() - started, "command": cmd[1:], "bench": json.loads(out.read_text())}


def main() -> int:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--workload", default="ddp")
    parser.add_argument("--out", default=f"bench/results/aa-cpu-{dt.date.today().isoformat()}.json")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    runs = []
    with tempfile.TemporaryDirectory(prefix="ccoverlap-aa-") as tmp:
        for i in range(1, args.runs + 1):
            run = one_run(args.workload, extra, Path(tmp), i)
            twin = next(r for r in run["bench"]["rows"] if r["strategy"] == "default#2")
            c = twin["vs_default"]
            run["verdict"], run["ratio"], run["ci"] = c["verdict"], c["ratio"], c["ci"]
            runs.append(run)
            print(f"run {i}/{args.runs}: default#2 {c['ratio']:.3f}x [{c['ci'][0]:.3f}-{c['ci'][1]:.3f}] "
                  f"{c['verdict']} ({run['wall_s']:.0f} s)", file=sys.stderr, flush=True)
    within = sum(r["verdict"] == NOISE for r in runs)
    widths = sorted(r["ci"][1] - r["ci"][0] for r in runs)
    summary = {"runs": len(runs), "within_noise": within, "target": "within noise in >= 19 of 20",
               "met": within >= 19 * len(runs) / 20, "median_ci_width": widths[len(widths) // 2],
               "repeats": runs[0]["bench"]["config"]["repeats"], "steps": runs[0]["bench"]["config"]["steps"]}
    write_json(args.out, {"provenance": provenance.collect(backend="gloo", world_size=2), "summary": summary,
                          "bench_options": extra, "workload": args.workload, "runs": runs})
    print(f"A/A: default#2 within noise of default in {within} of {len(runs)} bench runs "
          f"(median interval width {summary['median_ci_width']:.3f}); wrote {args.out}")
    return 0 if summary["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
