"""Issue 27's graph_dispatch headline, measured: with priority on, where do a typical step's kernels run in the CUDA
graph's replay and in the plain launches of the same program (dispatch)? From `bash bench/device/graph_priority.sh`:
the probe's line (does a captured kernel node keep its stream's priority) and the two doctor folders.

  python bench/summarize/graph_priority.py DEVICE_OUT --default bench/results/known-answers-2026-12-04-h200-files.tgz \
      --runs RUNS_OUT --runs-commit SHA --out bench/results/graph-priority-2026-12-04-h200.json

Per program, over the doctor's typical steps (medians, us from the step's first kernel): the step's span, the
first kernel's end (when the collective is ready), the collective's start and duration, the 20-wave grid's
duration; the same of the programs' default runs (priority off) from an earlier recorded run's doctor folders
(--default); and, from `bash bench/device/graph_priority_runs.sh` (--runs: its $OUT), each program's step times
plain, under priority and under carveout-hint+priority, without the profiler (the steps after the program's first
three; median, min, max, every sample). Nothing is fitted; the figures are the traces' and the runs'.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from ccoverlap.analysis import read_trace
from ccoverlap.analysis.steps import typical, windows
from ccoverlap.analysis.model import analysed_indices
from ccoverlap.util.inputs import extracted
from ccoverlap.util.output import write_json

PROGRAMS = ("graph_dispatch", "dispatch")
FIRST, GRID, COMM = "known_compute", "known_fat", "KnownAllReduce"
WARMUP = 3  # the runs' first steps, left out (as bench/device/known_answers.py does)


def step_figures(trace, idx: list[int]) -> dict[str, float]:
    ks = [trace.kernels[i] for i in idx]
    t0 = min(k.ts for k in ks)
    first = next(k for k in ks if k.name == FIRST)
    grid = next(k for k in ks if k.name == GRID)
    comm = next(k for k in ks if COMM in k.name)
    return {"span_us": max(k.end for k in ks) - t0, "ready_us": first.end - t0, "comm_start_us": comm.ts - t0,
            "comm_us": comm.dur, "grid_us": grid.dur, "grid_end_us": grid.end - t0}


def program(folder: Path) -> dict:
    trace = read_trace(folder / "rank0_trace.json.gz")
    steps = windows(trace, analysed_indices(trace))
    chosen = typical(trace).typical
    rows = [step_figures(trace, steps[n][1]) for n in chosen]
    return {"typical_steps": [steps[n][0] for n in chosen],
            "median": {k: statistics.median(r[k] for r in rows) for k in rows[0]}, "steps": rows}


def _run(path: Path) -> dict:
    """One plain run's step times (the program's --json), its first three steps left out as warm-up."""
    steps = json.loads(path.read_text())["steps_ms"][WARMUP:]
    return {"median_ms": statistics.median(steps), "min_ms": min(steps), "max_ms": max(steps), "steps_ms": steps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("device_out", type=Path,
                    help="the call's $OUT: graph-priority-probe.json, graph-priority-files.tgz")
    ap.add_argument("--default", required=True, type=Path, help="a recorded run's doctor folders (priority off)")
    ap.add_argument("--runs", required=True, type=Path, help="graph_priority_runs.sh's $OUT: PROGRAM-STRATEGY.json")
    ap.add_argument("--runs-commit", required=True, help="the commit those runs were made at")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    probe = json.loads((args.device_out / "graph-priority-probe.json").read_text())
    with extracted(args.device_out / "graph-priority-files.tgz") as root:
        programs = {p: program(root / f"doctor-{p}") for p in PROGRAMS}
        provenance = json.loads((root / "doctor-graph_dispatch.json").read_text())["provenance"]
    with extracted(args.default) as root:
        default = {p: program(root / f"doctor-{p}") for p in PROGRAMS}
    doc = {"what": __doc__.split("\n\n")[0].replace("\n", " "), "provenance": provenance | {
               "command": "TORCH_NCCL_HIGH_PRIORITY=1 ccoverlap doctor --skip 5 --steps 6 -- python3 "
                          "bench/known/<program>.py (bash bench/device/graph_priority.sh)",
               "summarized": "python bench/summarize/graph_priority.py"},
           "probe": probe, "programs": programs, "default": default, "default_from": args.default.name,
           "runs": {p: {f.stem.removeprefix(f"{p}-").replace("_", "+"): _run(f)
                        for f in sorted(args.runs.glob(f"{p}-*.json"))} for p in PROGRAMS},
           "runs_command": f"CCOVERLAP_COMMIT={args.runs_commit} bash bench/device/graph_priority_runs.sh"}
    write_json(str(args.out), doc)
    for p in PROGRAMS:
        for what, got in (("priority", programs[p]), ("default", default[p])):
            print(p, what, {k: round(v, 1) for k, v in got["median"].items()}, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
