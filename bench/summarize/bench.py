"""Markdown tables of bench results files (for docs/results.md): step time per workload and strategy, its ratio
to `default` with the bench's 95% interval and verdict (bench/launcher.py against_default), several files side
by side. Files recorded before rows kept their process sets (`runs`) are one process set a row, its series as
recorded or, older still, from its per-rank samples (per step, the slowest rank), as the bench computes it now.

With --json OUT, also the ratios docs/results.md states, one row per file, workload and strategy, derived from
the files' own numbers (the files are left as they are): `step_vs_default` (median step / default's),
`exposed_comm_vs_default`, `exposed_comm_share` (exposed communication / step) and, where the interposer ran,
`padded_share` (padded / launches).

usage: python bench/summarize/bench.py [--json OUT] LABEL=FILE [LABEL=FILE ...]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ccoverlap.bench.catalog import RUNS, SERIES
from ccoverlap.bench.launcher import against_default
from ccoverlap.util.stats import NOISE, Comparison

WORKLOADS = ("ddp", "fsdp", "tp", "moe", "diloco")


def load(path: str) -> dict[tuple[str, str], dict]:
    rows = [r for r in json.load(open(path))["rows"] if r["status"] == "ok" and r["workload"] != "micro"]
    for r in rows:
        if RUNS not in r:
            r[RUNS] = [{SERIES: r.get(SERIES) or [max(step) for step in zip(*r["samples"].values())]}]
    against_default(rows)
    return {(r["workload"], r["strategy"]): r for r in rows}


def cell(rows: dict, workload: str, strategy: str) -> str:
    r = rows.get((workload, strategy))
    if r is None:
        return "-"
    text = f"{r['step_ms']:.1f} ({r['step_ms_min']:.1f}-{r['step_ms_max']:.1f})"
    if r.get("vs_default"):
        c = Comparison.from_dict(r["vs_default"])
        text += f" {c.ratio:.3f}x {'~' if c.verdict == NOISE else c.verdict}"
    return text


def ratios(label: str, path: str, rows: dict) -> list[dict]:
    """One row per workload and strategy of one file: its step and exposed communication against default's."""
    out = []
    for (workload, strategy), r in rows.items():
        base = rows.get((workload, "default"))
        row = {"file": label, "workload": workload, "strategy": strategy, "step_ms": r["step_ms"],
               "step_vs_default": r["step_ms"] / base["step_ms"] if base else None,
               "exposed_comm_ms": r.get("exposed_comm_ms")}
        if r.get("exposed_comm_ms") is not None:
            row["exposed_comm_share"] = r["exposed_comm_ms"] / r["step_ms"]
            if base and base.get("exposed_comm_ms"):
                row["exposed_comm_vs_default"] = r["exposed_comm_ms"] / base["exposed_comm_ms"]
        if (r.get("interposer") or {}).get("launches"):
            row["padded_share"] = r["interposer"]["padded"] / r["interposer"]["launches"]
        out.append(row)
    return out


def write(out: str, pairs: list[str]) -> None:
    files = {label: path for label, path in (p.split("=", 1) for p in pairs)}
    doc = {"what": "ratios derived from bench results files by bench/summarize/bench.py --json (the files' own "
                   "numbers; nothing measured here)", "files": files,
           "rows": [row for label, path in files.items() for row in ratios(label, path, load(path))]}
    Path(out).write_text(json.dumps(doc, indent=1) + "\n")


def main(pairs: list[str]) -> None:
    if pairs[:1] == ["--json"]:
        out, *pairs = pairs[1:]
        write(out, pairs)
    files = [(p.split("=", 1)[0], load(p.split("=", 1)[1])) for p in pairs]
    strategies = list(dict.fromkeys(s for _, rows in files for (_, s) in rows))
    for workload in WORKLOADS:
        print(f"\n{workload}: step ms, median (min-max), ratio to default (~: within noise, 95% interval)\n")
        print("| strategy | " + " | ".join(label for label, _ in files) + " |")
        print("| --- |" + " --- |" * len(files))
        for s in strategies:
            print(f"| {s} | " + " | ".join(cell(rows, workload, s) for _, rows in files) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
