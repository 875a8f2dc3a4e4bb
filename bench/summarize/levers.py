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


def met(row: dict) -> tuple[bool, bool | None]:
    """(comm target met, total target met or None where the case bounds no total) for a derived row."""
    comm_bound, total_bound = TARGETS[row["case"]]
    total = None if total_bound is None else row["total_vs_ideal"] <= total_bound
    return row["comm_done_vs_alone"] <= comm_bound, total


#: docs/results.md's rows: (case label or "" under the same case, row label, the case, (run, strategy) pairs
#: whose spread the row gives; run: the index of the record among the marker's files)
GROUPS = (
    ("carveout (run 1)", "default", "carveout", ((0, "default"),)),
    ("", "priority / shape / nccl-cluster", "carveout", ((0, "priority"), (0, "shape"), (0, "nccl-cluster"))),
    ("", "carveout-hint (100)", "carveout", ((0, "carveout-hint"),)),
    ("", "carveout-hint=60+priority", "carveout", ((0, "carveout-hint=60+priority"),)),
    ("carveout (run 2)", "carveout-hint=58", "carveout", ((1, "carveout-hint=58"),)),
    ("green-cluster", "default / nccl-cluster", "green-cluster", ((0, "default"), (0, "nccl-cluster"))),
    ("", "green", "green-cluster", ((0, "green"),)),
    ("", "green+nccl-cluster", "green-cluster", ((0, "green+nccl-cluster"),)),
    ("", "priority", "green-cluster", ((0, "priority"),)),
    ("", "priority+shape", "green-cluster", ((0, "priority+shape"),)),
    ("persistent-gemm", "default", "persistent-gemm", ((0, "default"),)),
    ("", "priority, sm-carveout+priority, shape, nccl-cluster, nccl-threads", "persistent-gemm",
     tuple((run, s) for run in (0, 1) for s in ("priority", "sm-carveout+priority", "shape", "priority+shape",
                                                "priority+nccl-cluster", "nccl-threads+priority"))),
    ("", "green (24 SMs asked), green+priority", "persistent-gemm",
     tuple((run, s) for run in (0, 1) for s in ("green", "green+priority"))),
    ("", "green=32+priority+nccl-cluster", "persistent-gemm", ((1, "green=32+priority+nccl-cluster"),)),
    ("", "green=40+priority+nccl-cluster", "persistent-gemm", ((1, "green=40+priority+nccl-cluster"),)),
)


def _spread(rows: list[dict], key: str, fmt: str = "{:.2f}") -> str:
    low, high = (fmt.format(f(r[key] for r in rows)) for f in (min, max))
    return low if low == high else f"{low}-{high}"


def render_groups(docs: list[dict]) -> str:
    """The lever cases' rows as docs/results.md groups them (GROUPS): each group's spread of total, comm done and
    compute against their references, and whether the case's targets are met."""
    runs = [{(r["case"], r["strategy"]): derive(dict(r)) for r in d["rows"]} for d in docs]
    out = ["| case | strategy | total ms (x ideal) | comm done ms (x alone) | compute x | target |",
           "| --- | --- | --- | --- | --- | --- |"]
    for label, name, case, members in GROUPS:
        rows = [runs[run][(case, strategy)] for run, strategy in members]
        verdicts = {met(r) for r in rows}
        comm, total = verdicts.pop() if len(verdicts) == 1 else (None, None)
        target = ("mixed" if comm is None else "yes" if comm and total is not False
                  else "no" if not comm and not total else "comm yes, total no" if comm else "total yes, comm no")
        cells = [label, name, f"{_spread(rows, 'total_ms')} ({_spread(rows, 'total_vs_ideal')}x)",
                 f"{_spread(rows, 'comm_done_ms')} ({_spread(rows, 'comm_done_vs_alone')}x)",
                 _spread(rows, "compute_vs_alone"), target]
        out.append("|" + "".join(f" {c} |" if c else " |" for c in cells))
    return "\n".join(out)


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
        out.append(f"| {r['case']} | {r['strategy']} | {r['total_ms']:.2f} ({total_x:.2f}x) | {r['comm_done_ms']:.2f} "
                   f"({comm_x:.2f}x) | {r['compute_vs_alone']:.2f} | {'yes' if False not in met(r) else 'no'} |")
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
