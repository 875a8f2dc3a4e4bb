"""A compute kernel slowed beside a collective, step by step, from every recorded doctor capture of a program: when
the collective started against the grid released with it, and how much longer than alone the slowed kernel ran
beside it. The doctor reads the pattern as a grid released with a collective (analysis/mechanisms/compute_slowed.py,
CO_RELEASED); the what-if reproduces neither the slowdown nor what decides it (docs/whatif.md, "What it misses").
This is the evidence, read from the traces, not modelled.

  python bench/summarize/released_together.py --out bench/results/released-together-2026-12-07.json

Per analysed step of rank 0 (every step, typical or not: the question is what differs between them): the collective's
start after its ready time (the end of the kernel it waited for by its event), its lead over the program's grid that
may be released with it (`PROGRAMS`: heldout_sort's first grid, `fill_reverse_indices_kernel`, which starts as the
sort's device-to-device copy of its input ends; heldout_fp8_gemm's amax reduction, launched after the collective),
and the slowed kernel's measured time over its time alone (the doctor's alone window).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
from pathlib import Path
from typing import NamedTuple

from ccoverlap.analysis import analysed_indices, analyze, device_limits, windows
from ccoverlap.analysis.mechanisms.base import SM_WAIT_TOLERANCE_US
from ccoverlap.gpu.provenance import source_commit
from ccoverlap.util.inputs import extracted
from ccoverlap.util.output import write_json
from ccoverlap.whatif.step import from_trace

RESULTS = Path(__file__).resolve().parents[1] / "results"
#: a collective this close to the grid (us, either side) counts as released with it: the doctor's launch latency
TOGETHER_US = SM_WAIT_TOLERANCE_US


class Program(NamedTuple):
    archives: tuple[str, ...]  # the archives holding its doctor captures (folders named doctor-<program>...)
    grid: str  # a name part of the grid that may be released with the collective
    slowed: str  # a name part of the kernel that slowed


PROGRAMS = {
    "heldout_sort": Program(("known-answers-heldout-2026-12-06-e-h100-files.tgz",
                             "queued-doctor-2026-12-06-h100-files.tgz", "hold-doctor-2026-12-06-h100-files.tgz"),
                            "fill_reverse_indices_kernel", "RadixSortHistogramKernel"),
    "heldout_fp8_gemm": Program(("known-answers-heldout-2026-12-07-g-h100-files.tgz",), "MaxNanFunctor",
                                "MaxNanFunctor"),
}


def steps_of(folder: Path, p: Program) -> list[dict]:
    a = analyze(folder)  # the trace with the doctor's alone window matched
    trace = a.strategies[folder.name][0]
    device = device_limits(trace.device)
    out = []
    for n, (name, _) in enumerate(windows(trace, analysed_indices(trace))):
        step, _ = from_trace(trace, device, step=n)
        ks = step.kernels
        comm = next((i for i, k in enumerate(ks) if k.comm), None)
        grid = next((k for k in ks if p.grid in k.name), None)
        slowed = next((k for k in ks if p.slowed in k.name), None)
        if comm is None or grid is None or slowed is None or ks[comm].measured_start_us is None:
            continue
        c = ks[comm]
        ready = max((ks[d].measured_end_us for d in c.deps if ks[d].measured_end_us is not None), default=None)
        took = slowed.measured_end_us - slowed.measured_start_us
        out.append({"step": name, "comm_start_us": c.measured_start_us,
                    "comm_after_ready_us": None if ready is None else c.measured_start_us - ready,
                    "comm_lead_over_grid_us": grid.measured_start_us - c.measured_start_us,
                    "slowed_us": took, "slowed_alone_us": slowed.alone_us, "slowdown": took / slowed.alone_us,
                    "measured_step_us": step.measured_us})
    return out


def summary(steps: list[dict]) -> dict:
    near = [s for s in steps if abs(s["comm_lead_over_grid_us"]) <= TOGETHER_US]
    apart = [s["slowdown"] for s in steps if s not in near]
    together = [s["slowdown"] for s in near]
    leads = [s["comm_lead_over_grid_us"] for s in near]
    return {"steps": len(steps),
            "apart": {"steps": len(apart), "slowdown": sorted(apart)},
            "together": {"steps": len(together), "slowdown_median": statistics.median(together) if together else None,
                         "slowdown_min": min(together, default=None), "slowdown_max": max(together, default=None),
                         "lead_min_us": min(leads, default=None), "lead_max_us": max(leads, default=None)}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    programs = {}
    with contextlib.ExitStack() as stack:
        for program, p in PROGRAMS.items():
            captures = {}
            for archive in p.archives:
                root = stack.enter_context(extracted(RESULTS / archive))
                for folder in sorted(f for f in root.glob(f"doctor-{program}*") if f.is_dir()):
                    captures[f"{archive.removesuffix('-files.tgz')}/{folder.name}"] = steps_of(folder, p)
            every = [s for steps in captures.values() for s in steps]
            programs[program] = {"grid": p.grid, "slowed": p.slowed, "captures": captures, "summary": summary(every),
                                 "captured": [json.loads((RESULTS / a.replace("-files.tgz", ".json")).read_text())
                                              .get("provenance", {}) for a in p.archives]}
    doc = {"what": __doc__.split("\n\n")[0].replace("\n", " "),
           "provenance": {"analysed": {"command": "python bench/summarize/released_together.py",
                                       "commit": source_commit(), "machine": f"CPU ({platform.machine()}), no GPU"}},
           "programs": programs}
    write_json(args.out, doc)
    print(json.dumps({k: v["summary"] for k, v in programs.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
