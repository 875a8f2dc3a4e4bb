"""The lever cases of the lab (`ccoverlap lab --case NAME`) as one results file, with the rows the
levers issue asks for, and a markdown summary against its targets (for docs/results.md).

Derived per row (the table's ratios): `total_vs_ideal` (total / max(compute alone, comm alone)),
`comm_done_vs_alone` and `compute_vs_alone`; --derive adds them to written files.

usage: python bench/summarize/levers.py OUT.json CASE=LAB.json [CASE=LAB.json ...]
       python bench/summarize/levers.py --derive OUT.json [OUT.json ...]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

FIELDS = ("case", "strategy", "levers", "order", "status", "total_ms", "total_ms_min", "total_ms_max", "comm_done_ms",
          "comm_done_ms_min", "comm_done_ms_max", "compute_ms", "compute_alone_ms", "comm_alone_ms", "sequential_ms",
          "efficiency", "comm_threads", "comm_ctas", "comm_cluster", "comm_priority", "pad_bytes", "carveout_hint",
          "green_comm_sms", "carveout_sms", "outputs_match", "comm_wrong", "comm_timeline", "samples")
#: the issue's targets per case: comm done / alone, total / ideal (None: no bound)
TARGETS = {"carveout": (1.2, 1.05), "green-cluster": (2.0, None), "persistent-gemm": (1.5, 1.15)}


def derive(row: dict) -> dict:
    """The row with its ratios: total against ideal, comm done against comm alone, compute against alone."""
    if row["status"] == "ok" and row["strategy"] not in ("compute-alone", "comm-alone"):
        row["total_vs_ideal"] = row["total_ms"] / max(row["compute_alone_ms"], row["comm_alone_ms"])
        row["comm_done_vs_alone"] = row["comm_done_ms"] / row["comm_alone_ms"]
        row["compute_vs_alone"] = row["compute_ms"] / row["compute_alone_ms"]
    return row


def merge(cases: dict[str, dict]) -> dict:
    rows, provenance = [], {}
    for case, lab in cases.items():
        provenance[case] = lab["provenance"]
        for r in lab["rows"]:
            rows.append(derive({"case": case, **{k: r[k] for k in FIELDS[1:] if k in r}}))
    return {"provenance": provenance, "targets": TARGETS, "rows": rows}


def table(data: dict) -> str:
    out = ["| case | strategy | total ms (x ideal) | comm done ms (x alone) | compute x | target met |",
           "| --- | --- | --- | --- | --- | --- |"]
    for r in data["rows"]:
        if r["strategy"] in ("compute-alone", "comm-alone"):
            continue
        if r["status"] != "ok":
            out.append(f"| {r['case']} | {r['strategy']} | {r['status']} | | | |")
            continue
        r = derive(dict(r))
        comm_x, total_x = r["comm_done_vs_alone"], r["total_vs_ideal"]
        comm_bound, total_bound = TARGETS[r["case"]]
        met = comm_x <= comm_bound and (total_bound is None or total_x <= total_bound)
        out.append(f"| {r['case']} | {r['strategy']} | {r['total_ms']:.2f} ({total_x:.2f}x) | {r['comm_done_ms']:.2f} "
                   f"({comm_x:.2f}x) | {r['compute_vs_alone']:.2f} | {'yes' if met else 'no'} |")
    return "\n".join(out)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--derive"]:
        for path in argv[1:]:
            text = Path(path).read_text()
            data = json.loads(text)
            data["rows"] = [derive(r) for r in data["rows"]]
            Path(path).write_text(json.dumps(data, indent=1 if text.startswith("{\n") else None)
                                  + ("\n" if text.endswith("\n") else ""))
        print(table(data))
        return
    out, *pairs = argv
    cases = {case: json.loads(Path(path).read_text()) for case, path in (p.split("=", 1) for p in pairs)}
    data = merge(cases)
    Path(out).write_text(json.dumps(data))
    print(table(data))


if __name__ == "__main__":
    main(sys.argv[1:])
