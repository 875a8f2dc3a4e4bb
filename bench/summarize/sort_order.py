"""heldout_sort's compute slowed beside its collective, step by step, from every recorded doctor capture of it: when
the collective started against the sort's first grid, and how much longer than alone the radix sort's histogram
kernel ran beside it. The what-if reproduces neither the histogram's slowdown nor what decides it (docs/whatif.md,
"What it misses"); this is the evidence, read from the traces, not modelled.

  python bench/summarize/sort_order.py --out bench/results/heldout-sort-order-2026-12-07.json

Per analysed step of rank 0 (every step, typical or not: the question is what differs between them): the collective's
start after its ready time (the end of the kernel it waited for by its event), its lead over the sort's first grid
(`fill_reverse_indices_kernel`, which starts as the sort's device-to-device copy of its input ends), and the
histogram's measured time over its time alone (the doctor's alone window).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
from pathlib import Path

from ccoverlap.analysis import analysed_indices, analyze, device_limits, windows
from ccoverlap.gpu.provenance import source_commit
from ccoverlap.util.inputs import extracted
from ccoverlap.util.output import write_json
from ccoverlap.whatif.step import from_trace

RESULTS = Path(__file__).resolve().parents[1] / "results"
#: the archives holding heldout_sort's doctor captures (folder names start with doctor-heldout_sort)
ARCHIVES = ("known-answers-heldout-2026-12-06-e-h100-files.tgz", "queued-doctor-2026-12-06-h100-files.tgz",
            "hold-doctor-2026-12-06-h100-files.tgz")
FIRST_GRID, HISTOGRAM = "fill_reverse_indices_kernel", "RadixSortHistogramKernel"


def steps_of(folder: Path) -> list[dict]:
    a = analyze(folder)  # the trace with the doctor's alone window matched
    trace = a.strategies[folder.name][0]
    device = device_limits(trace.device)
    out = []
    for n, (name, _) in enumerate(windows(trace, analysed_indices(trace))):
        step, _ = from_trace(trace, device, step=n)
        ks = step.kernels
        comm = next((i for i, k in enumerate(ks) if k.comm), None)
        first = next((k for k in ks if FIRST_GRID in k.name), None)
        hist = next((k for k in ks if HISTOGRAM in k.name), None)
        if comm is None or first is None or hist is None or ks[comm].measured_start_us is None:
            continue
        c = ks[comm]
        ready = max((ks[d].measured_end_us for d in c.deps if ks[d].measured_end_us is not None), default=None)
        out.append({"step": name, "comm_start_us": c.measured_start_us,
                    "comm_after_ready_us": None if ready is None else c.measured_start_us - ready,
                    "comm_lead_over_first_grid_us": first.measured_start_us - c.measured_start_us,
                    "histogram_us": hist.measured_end_us - hist.measured_start_us, "histogram_alone_us": hist.alone_us,
                    "histogram_slowdown": (hist.measured_end_us - hist.measured_start_us) / hist.alone_us,
                    "measured_step_us": step.measured_us})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    captures = {}
    with contextlib.ExitStack() as stack:
        for archive in ARCHIVES:
            root = stack.enter_context(extracted(RESULTS / archive))
            for folder in sorted(f for f in root.glob("doctor-heldout_sort*") if f.is_dir()):
                captures[f"{archive.removesuffix('-files.tgz')}/{folder.name}"] = steps_of(folder)
    every = [s for steps in captures.values() for s in steps]
    early = [s["histogram_slowdown"] for s in every if s["comm_lead_over_first_grid_us"] > 50]
    late = [s["histogram_slowdown"] for s in every if s["comm_lead_over_first_grid_us"] <= 50]
    doc = {"what": __doc__.split("\n\n")[0].replace("\n", " "),
           "provenance": {"captured": [json.loads((RESULTS / a.replace("-files.tgz", ".json")).read_text())
                                       .get("provenance", {}) for a in ARCHIVES],
                          "analysed": {"command": "python bench/summarize/sort_order.py", "commit": source_commit(),
                                       "machine": f"CPU ({platform.machine()}), no GPU"}},
           "captures": captures,
           "summary": {"steps": len(every),
                       "comm_more_than_50us_before_first_grid": {"steps": len(early),
                                                                 "histogram_slowdown": sorted(early)},
                       "comm_within_50us_of_first_grid": {
                           "steps": len(late), "histogram_slowdown_median": statistics.median(late) if late else None,
                           "histogram_slowdown_min": min(late, default=None),
                           "histogram_slowdown_max": max(late, default=None)}}}
    write_json(args.out, doc)
    print(json.dumps(doc["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
