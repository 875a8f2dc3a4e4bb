"""The doctor against the lab's known constructions (bench/results/doctor-*/doctor-validation.json, written by
bench/device/doctor_h200.sh's analyses), for docs/results.md: per case, the wait the lab implies, the doctor's
SM-wait per profiled step, its cause and its verdict (the recorded one, shortened to headroom and first lever).

usage: python bench/summarize/doctor.py bench/results/doctor-2026-12-01-h200/doctor-validation.json
"""
from __future__ import annotations

import json
import re
import sys

CASES = {"fma+nccl": "fma + nccl proxy", "sparse+nccl-allreduce": "sparse + AllReduce proxy"}
#: what the block timelines add to a cell, not in the record: (case, strategy) -> {column: note}
NOTES = {("fma+nccl", "default"): {"cause": "FMA fills 2,048 threads/SM"},
         ("fma+nccl", "priority"): {"implied": "one FMA wave"},
         ("sparse+nccl-allreduce", "carveout-hint=60"): {"implied": "CTAs start at 0.02 ms"}}
_HEADROOM = re.compile(r"headroom ([\d.]+ ms) \(([\d.]+%)\); try ([^ ]+)")
_NOTHING = re.compile(r"nothing to gain here: headroom [\d.]+ ms \(([\d.]+%)\)")


def short(verdict: str) -> str:
    """'headroom 3.625 ms (23.0%): shape' or 'nothing to gain (0.0%)' from the doctor's verdict line."""
    if m := _HEADROOM.match(verdict):
        return f"headroom {m[1]} ({m[2]}): {m[3]}"
    if m := _NOTHING.match(verdict):
        return f"nothing to gain ({m[1]})"
    return verdict


def render_lab_cases(docs: list[dict]) -> str:
    """Per lab case (default first): implied wait, the doctor's SM-wait in each step, cause, verdict."""
    (doc,) = docs
    cases = list(dict.fromkeys(c["case"] for c in doc["lab_cases"]))
    rows = sorted(doc["lab_cases"], key=lambda c: (cases.index(c["case"]), c["strategy"] != "default"))
    out = ["| case | strategy | implied wait ms | doctor's SM-wait ms (two steps) | cause | verdict |",
           "| --- | --- | --- | --- | --- | --- |"]
    for c in rows:
        notes = NOTES.get((c["case"], c["strategy"]), {})
        cells = {"implied": f"{c['implied_wait_ms']:.3f}", "cause": ", ".join(dict.fromkeys(c["causes"]))}
        cells = {k: f"{v} ({notes[k]})" if k in notes else v for k, v in cells.items()}
        out.append(f"| {CASES.get(c['case'], c['case'])} | {c['strategy']} | {cells['implied']} | "
                   f"{', '.join(f'{w:.3f}' for w in c['doctor_sm_wait_ms'])} | {cells['cause']} | "
                   f"{short(c['verdict'])} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(render_lab_cases([json.load(open(sys.argv[1]))]))
