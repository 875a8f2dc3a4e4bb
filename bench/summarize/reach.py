"""Issue 28's reach check: from one-GPU emulated doctor captures of the bench's ddp, fsdp and tp (2 ranks emulated
at 280 GB/s, the size of the 2 x H200 run), `ccoverlap whatif` predicts the step; set beside every recording of
the same workloads on two H200s with real NCCL.

  python bench/summarize/reach.py [--captures TGZ|DIR] [--out bench/results/reach-2026-12-04-h200.json] [--device D]
  (docs/results.md's table: `render_reach`, through bench/summarize/results_md.py)

Extracts the captures (--captures; default bench/results/reach-2026-12-04-h200-files.tgz: the doctor folders `bash
bench/device/reach.sh` captured) and runs the what-if on each with the shipped H200 calibration: nothing is fitted
here. The predictions are the what-if's: anchored to the profiled steps, and scaled to the unprofiled step (the
doctor's step records; the profiler's cost taken as the same under every strategy). A prediction reaches the real
step where it is within 10% of it; a workload is met where every recording of its real step is reached. A strategy
the what-if gives as a range (the capture cannot tell how much its kernels slow each other) reaches a recording
within 10% of the range.

The real steps are every row of bench/results/bench-x2-h200-2026-11-30-*.json for the workload and strategy with
status ok: the recordings differ from one another, and the record keeps each.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from ccoverlap.doctor import record
from ccoverlap.gpu.provenance import source_commit
from ccoverlap.util.inputs import extracted
from ccoverlap.util.output import write_json
from ccoverlap.whatif import session
from ccoverlap.whatif.config import WhatIfConfig

RESULTS = Path(__file__).resolve().parents[1] / "results"
CAPTURES = RESULTS / "reach-2026-12-04-h200-files.tgz"
REAL = ("bench-x2-h200-2026-11-30-all.json", "bench-x2-h200-2026-11-30-ddp.json",
        "bench-x2-h200-2026-11-30-ddp-traced.json", "bench-x2-h200-2026-11-30-fsdp.json",
        "bench-x2-h200-2026-11-30-tp.json")
WORKLOADS = ("ddp", "fsdp", "tp")
STRATEGIES = ("default", "priority", "priority+shape")  # the bench's strategies the 2 x H200 runs recorded
TARGET = 0.10


def real_steps() -> dict[tuple[str, str], list[dict]]:
    """(workload, strategy) -> each recording's median step and its ranks' spread, ms."""
    out: dict[tuple[str, str], list[dict]] = {}
    for name in REAL:
        for r in json.loads((RESULTS / name).read_text())["rows"]:
            if r.get("status") == "ok" and r.get("step_ms") and r["workload"] in WORKLOADS:
                samples = [x for v in (r.get("samples") or {}).values() for x in v]
                out.setdefault((r["workload"], r["strategy"]), []).append(
                    {"file": name, "step_ms": r["step_ms"], "exposed_comm_ms": r.get("exposed_comm_ms"),
                     "min_ms": min(samples, default=None), "max_ms": max(samples, default=None)})
    return out


def error(predicted_ms: float, recording: dict) -> float:
    """A prediction's error relative to a recording's real step (it reaches the step within TARGET)."""
    return predicted_ms / recording["step_ms"] - 1


def workload_row(workload: str, folder: Path, real: dict, device: str = "") -> dict:
    config = WhatIfConfig(levers=STRATEGIES[1:], device=device).validate()
    report = session.run(config, folder, record.folder_processes(folder)[0])
    check, own = report["validation"], report["unprofiled"]
    row = {"workload": workload, "refused": report["refused"], "measured_profiled_step_ms":
           check["measured_step_us"] / 1000, "simulated_default_ms": check["simulated_default_us"] / 1000,
           "measured_idle_ms": check["measured_idle_us"] and check["measured_idle_us"] / 1000,
           "unprofiled_step_ms": own and own["step_ms"], "profiler_slowdown": own and own["profiler_slowdown"],
           "notes": report["notes"], "strategies": {}}
    for p in report["predictions"]:
        recordings = real.get((workload, p["strategy"]), [])
        if p["status"] == "range" and own:  # an interval, not a point: does each recording lie inside it?
            lo, hi = (u / 1000 for u in p["unprofiled_range_us"])
            row["strategies"][p["strategy"]] = {
                "predicted_unprofiled_range_ms": [lo, hi], "real": recordings,
                "reached": (inside := [lo <= r["step_ms"] <= hi or min(abs(error(lo, r)), abs(error(hi, r))) <= TARGET
                                       for r in recordings]),
                "met": bool(inside) and all(inside)}
        if p["status"] != "ok":
            continue
        errors = [error(p["unprofiled_step_us"] / 1000, r) for r in recordings] if own else []
        row["strategies"][p["strategy"]] = {
            "predicted_ms": p["step_us"] / 1000, "predicted_unprofiled_ms": own and p["unprofiled_step_us"] / 1000,
            "real": recordings, "errors_unprofiled": errors,
            "errors_profiled": [error(p["step_us"] / 1000, r) for r in recordings],
            "reached": (reached := [abs(e) <= TARGET for e in errors]), "met": bool(reached) and all(reached)}
    return row


def render_reach(docs: list[dict]) -> str:
    """Per workload and strategy: the emulated capture's steps, the prediction, every real recording, the error."""
    out = ["| workload | strategy | emulated capture: profiled / unprofiled ms | predicted ms: as profiled / "
           "unprofiled | 2 x H200 NCCL ms (each recording) | error of the unprofiled prediction | within 10% |",
           "|---|---|---|---|---|---|---|"]
    for doc in docs:
        for w in doc["workloads"]:
            for name, s in w["strategies"].items():
                if "predicted_unprofiled_range_ms" in s:
                    continue  # a range: in the record, not this table of points
                real = ", ".join(f"{r['step_ms']:.2f}" for r in s["real"]) or "-"
                errors = ", ".join(f"{100 * e:+.1f}%" for e in s["errors_unprofiled"]) or "-"
                within = f"{sum(s['reached'])} of {len(s['reached'])}" if s["reached"] else "-"
                out.append(f"| {w['workload']} | {name} | {w['measured_profiled_step_ms']:.2f} / "
                           f"{w['unprofiled_step_ms']:.2f} | {s['predicted_ms']:.2f} / "
                           f"{s['predicted_unprofiled_ms']:.2f} | {real} | {errors} | {within} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--captures", type=Path, default=CAPTURES, help="the doctor folders: a .tgz or its folder")
    ap.add_argument("--out", type=Path, default=RESULTS / "reach-2026-12-04-h200.json")
    ap.add_argument("--device", default="", help="predict the step moved to this GPU preset (a capture made on "
                    "another GPU; the move is labelled with its assumptions in each row's notes)")
    args = ap.parse_args()
    with extracted(args.captures) as root:
        rows = [workload_row(w, root / w, real_steps(), args.device) for w in WORKLOADS]
        captured = json.loads((root / "ddp-doctor.json").read_text())["provenance"]
    for r in rows:
        d = r["strategies"].get("default", {})
        if r["refused"]:
            print(f"{r['workload']}: {r['refused']}", file=sys.stderr)
            continue
        print(f"{r['workload']}: predicted {d.get('predicted_unprofiled_ms') or 0:.2f} ms unprofiled against "
              + ", ".join(f"{x['step_ms']:.2f}" for x in d.get("real", [])) + " ms real: "
              + ("met" if d.get("met") else "missed"), file=sys.stderr)
    doc = {
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "provenance": {
            "captured": {k: captured.get(k) for k in ("gpu", "driver", "cuda", "torch", "nccl", "date", "commit")}
            | {"command": "bash bench/device/reach.sh", "doctor_command": captured.get("command"),
               "files": args.captures.name},
            "predicted_for": args.device or "the captured GPU",
            "real_from": list(REAL),
            "analysed": {"command": " ".join(["python bench/summarize/reach.py", *sys.argv[1:]]),
                         "commit": source_commit(),
                         "machine": f"CPU ({platform.machine()}, {os.cpu_count()} cores), no GPU",
                         "python": platform.python_version()},
            "method": " ".join(__doc__.split("\n\n")[2:]).replace("\n", " "),
            "target": TARGET, "fitted": "nothing: the shipped H200 calibration",
        },
        "workloads": rows,
    }
    write_json(str(args.out), doc)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
