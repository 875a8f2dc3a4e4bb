"""Markdown summary of `ccoverlap tune` results files (bench/results/tune-*.json), for docs/results.md: one row
per run, in the order given: its budget, trials, the doctor's headroom and first lever, the decision, and the
kept setting or the candidates against the default.

usage: python bench/summarize/tune.py bench/results/tune-2026-12-01-h200-diloco-40.json [...]
"""
from __future__ import annotations

import json
import sys

from ccoverlap.util.stats import NOISE

#: a run whose command is no bench workload, by its script
PROGRAMS = {"tests/data/doctor_train.py": "one GPU, no collective"}
#: what a lever's value counts, for the decision column
UNITS = {"nccl-ctas": "CTAs"}


def label(run: dict) -> str:
    command = run["command"]
    if "ccoverlap.bench.train" in command:
        workload = command[command.index("ccoverlap.bench.train") + 1]
        return f"{workload}, {command[command.index('--busbw') + 1]} GB/s"
    return next((v for k, v in PROGRAMS.items() if k in command), " ".join(command))


def doctor(run: dict) -> str:
    d = run["doctor"]
    if d is None:
        return "(no room for it)"
    if not d["comm_seen"]:
        return "no communication"
    if d["recommended"]:
        return f"{d['headroom_pct']:.1f}%, {d['recommended'][0]}"
    return f"{d['headroom_pct']:.1f}%: nothing to gain"


def _against(name: str, c: dict) -> str:
    verdict = "" if c["verdict"] == NOISE else f" {c['verdict']}"
    return f"{name} {c['ratio']:.3f}x [{c['ci'][0]:.3f}-{c['ci'][1]:.3f}]{verdict}".strip()


def outcome(run: dict) -> tuple[str, str]:
    """(decision, against the default) of one run."""
    best = run["best"]
    if run["decision"] == "tuned":
        values = ", ".join(f"{v} {UNITS[k]}" if k in UNITS else f"{k}={v}" for k, v in best["levers"].items())
        return f"**{best['name']}** ({values})", _against("", run["comparison"])
    if not run["settings"]:
        return run["decision"], "no candidate fitted in the budget" if "no candidate" in run["reason"] else \
            "levers skipped"
    refused = {t["name"] for t in run["trials"] if (t["refused"] or "").startswith("changed the result")}
    return run["decision"], "; ".join(_against(name, c) + (", refused (result)" if name in refused else "")
                                      for name, c in run["settings"].items())


def render_runs(docs: list[dict]) -> str:
    """One row per tune run: budget (minutes), trials, doctor, decision, against the default (95% interval)."""
    out = ["| run | budget | trials | doctor: headroom, first lever | decision | vs default (95% CI) |",
           "|---|---|---|---|---|---|"]
    for i, run in enumerate(docs):
        decision, against = outcome(run)
        budget = f"{run['config']['budget']:g}" + (" min" if i == 0 else "")
        out.append(f"| {label(run)} | {budget} | {len(run['trials'])} | {doctor(run)} | {decision} | {against} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(render_runs([json.load(open(p)) for p in sys.argv[1:]]))
