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
import statistics
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


def rows_of(doc: dict) -> dict[tuple[str, str], dict]:
    """(workload, strategy) -> its step row as recorded (its own `vs_default`; nothing recomputed), micro left out."""
    return {(r["workload"], r["strategy"]): r for r in doc["rows"] if r["status"] == "ok" and r["workload"] != "micro"}


def _strategies(*tables: dict) -> list[str]:
    return list(dict.fromkeys(s for rows in tables for (_, s) in rows))


def _span(r: dict, digits: int) -> str:
    return f"{r['step_ms']:.{digits}f} ({r['step_ms_min']:.{digits}f}-{r['step_ms_max']:.{digits}f})"


def _verdict(r: dict) -> str:
    return "~" if r["vs_default"]["verdict"] == NOISE else r["vs_default"]["verdict"]


def render_x2(docs: list[dict]) -> str:
    """Per strategy on real NCCL: ddp's step and exposed communication, the traced ddp run's step, the others'."""
    rows, traced = rows_of(docs[0]), rows_of(docs[1])
    out = ["| strategy | ddp step ms | exposed comm ms | ddp, traced run | fsdp | tp | moe |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for s in _strategies(rows):
        ddp = rows[("ddp", s)]
        out.append(f"| {s} | {_span(ddp, 2)} | {ddp['exposed_comm_ms']:.2f} | {traced[('ddp', s)]['step_ms']:.2f} | "
                   + " | ".join(_span(rows[(w, s)], 1) for w in ("fsdp", "tp", "moe")) + " |")
    return "\n".join(out)


#: the emulated suite's columns: (header, index of the record among the marker's files, workload)
EMULATED_COLUMNS = (("ddp, batch 4", 0, "ddp"), ("fsdp, batch 4", 0, "fsdp"), ("fsdp, batch 32", 1, "fsdp"),
                    ("tp, batch 32", 1, "tp"), ("moe, batch 32", 1, "moe"))


def render_emulated(docs: list[dict]) -> str:
    """Step ms (min-max) per strategy and emulated workload, with its change against `default` ('-': not run)."""
    tables = [rows_of(d) for d in docs]
    out = ["| strategy | " + " | ".join(h for h, _, _ in EMULATED_COLUMNS) + " |",
           "| --- |" + " --- |" * len(EMULATED_COLUMNS)]
    for s in _strategies(*tables):
        cells = []
        for _, i, w in EMULATED_COLUMNS:
            r, base = tables[i].get((w, s)), tables[i][(w, "default")]
            cells.append("-" if r is None else _span(r, 1) if s == "default"
                         else f"{_span(r, 1)} {100 * (r['step_ms'] / base['step_ms'] - 1):+.0f}%")
        out.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def render_emulation_vs_real(docs: list[dict]) -> str:
    """ddp's step and exposed communication on real NCCL beside the emulation's, for the strategies both ran."""
    real, emulated = rows_of(docs[0]), rows_of(docs[1])
    out = ["| ddp | 2 x H200, NCCL | one H200, 2 emulated ranks |", "| --- | --- | --- |"]
    for s in _strategies(real):
        if ("ddp", s) in emulated:
            out.append(f"| {s} | " + " | ".join(f"{t[('ddp', s)]['step_ms']:.2f} ms, exposed "
                                                f"{t[('ddp', s)]['exposed_comm_ms']:.2f}" for t in (real, emulated))
                       + " |")
    return "\n".join(out)


def render_repeats(docs: list[dict], workload: str = "fsdp") -> str:
    """One workload in several runs of process sets: median (min-max), the verdict against default with its
    interval, and each set's median step."""
    tables = [rows_of(d) for d in docs]
    out = [f"| {workload}, ms | " + " | ".join(f"run {i}: median (min-max), vs default | each set's median"
                                              for i in range(1, len(docs) + 1)) + " |",
           "| --- |" + " --- | --- |" * len(docs)]
    for s in _strategies(*tables):
        cells = []
        for rows in tables:
            r = rows[(workload, s)]
            vs = "baseline" if s == "default" else (f"{_verdict(r)} {r['vs_default']['ratio']:.3f}x "
                                                    "[{:.3f}-{:.3f}]".format(*r["vs_default"]["ci"]))
            sets = ", ".join(f"{statistics.median(run['step_samples_ms']):.2f}" for run in r[RUNS])
            cells += [f"{_span(r, 2)} {vs}", sets]
        out.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def render_against_default(docs: list[dict]) -> str:
    """Per workload: default's step (min-max), then each strategy's ratio to it with the bench's verdict."""
    (rows,) = [rows_of(d) for d in docs]
    strategies = [s for s in _strategies(rows) if s != "default"]
    out = ["| workload | default ms (min-max) | " + " | ".join(strategies) + " |",
           "|---|---|" + "---|" * len(strategies)]
    for w in (w for w in WORKLOADS if (w, "default") in rows):
        out.append(f"| {w} | {_span(rows[(w, 'default')], 2)} | "
                   + " | ".join(f"{rows[(w, s)]['vs_default']['ratio']:.3f} {_verdict(rows[(w, s)])}"
                                for s in strategies) + " |")
    return "\n".join(out)


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
