"""Markdown tables of the known-answer runs (bench/results/known-answers-*.json, bench/device/known_answers.py),
for docs/results.md: tune with the doctor's ordering beside the registry's.

usage: python bench/summarize/known_answers.py bench/results/known-answers-tune-order-2026-12-04-h200.json [...]
"""
from __future__ import annotations

import json
import sys


def _verdict(run: dict) -> str:
    return f"kept {1 / run['speedup']:.3f}x" if run["decision"] == "tuned" else run["decision"]


def render_tune_orders(docs: list[dict]) -> str:
    """Per program tuned both ways (every record's, in order): the winner, trials to it and to the verdict, the
    verdict with the kept setting's step against the default's."""
    out = ["| program | winner | trials to the winner: doctor / registry | trials to the verdict: doctor / registry "
           "| verdict: doctor / registry |", "|---|---|---|---|---|"]
    for doc in docs:
        for program, p in doc["programs"].items():
            if not (p.get("tune") and p.get("tune_registry")):
                continue
            runs = (p["tune"], p["tune_registry"])
            winner = next((r["best"] for r in runs if r["decision"] == "tuned"), "-")
            to_winner = " / ".join(str(r["trials_to_winner"] or "never") for r in runs)
            out.append(f"| {program} | {winner} | {to_winner} | "
                       f"{' / '.join(str(r['trials_to_verdict']) for r in runs)} | "
                       f"{' / '.join(_verdict(r) for r in runs)} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(render_tune_orders([json.load(open(p)) for p in sys.argv[1:]]))
