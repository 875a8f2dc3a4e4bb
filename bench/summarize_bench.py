"""Markdown tables of bench results files (for docs/results.md): step time per workload and
strategy, the change against `default`, and several files side by side.

usage: python bench/summarize_bench.py LABEL=FILE [LABEL=FILE ...]
"""
from __future__ import annotations

import json
import sys

WORKLOADS = ("ddp", "fsdp", "tp", "moe")


def load(path: str) -> dict[tuple[str, str], dict]:
    rows = json.load(open(path))["rows"]
    return {(r["workload"], r["strategy"]): r for r in rows if r["status"] == "ok" and r["workload"] != "micro"}


def cell(rows: dict, workload: str, strategy: str) -> str:
    r, base = rows.get((workload, strategy)), rows.get((workload, "default"))
    if r is None:
        return "-"
    text = f"{r['step_ms']:.1f} ({r['step_ms_min']:.1f}-{r['step_ms_max']:.1f})"
    if base and strategy != "default":
        text += f" {100 * (r['step_ms'] / base['step_ms'] - 1):+.0f}%"
    return text


def main(pairs: list[str]) -> None:
    files = [(p.split("=", 1)[0], load(p.split("=", 1)[1])) for p in pairs]
    strategies = list(dict.fromkeys(s for _, rows in files for (_, s) in rows))
    for workload in WORKLOADS:
        print(f"\n{workload}: step ms, median (min-max), change vs default\n")
        print("| strategy | " + " | ".join(label for label, _ in files) + " |")
        print("| --- |" + " --- |" * len(files))
        for s in strategies:
            print(f"| {s} | " + " | ".join(cell(rows, workload, s) for _, rows in files) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
