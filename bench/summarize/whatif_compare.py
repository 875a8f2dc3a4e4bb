"""One change to the what-if, judged on every validation set: each set's record before and after (both written by
bench/summarize/whatif_validation.py, at the two commits), the counts side by side and every row whose judgement
changed. Right = point rows within target + ranges holding the realized ratio; refused rows are neither.

  python bench/summarize/whatif_compare.py --what "..." --set main BEFORE.json AFTER.json [--set ...] --out OUT.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ccoverlap.util.output import write_json

COUNTS = ("reproduced", "rows_predicted", "rows_within_target", "rows_refused", "rows_range", "range_rows_holding",
          "rows_change_judged", "rows_change_within_target", "changing_rows_predicted", "changing_rows_within_target",
          "changing_rows_refused")


def right(summary: dict) -> int:
    return summary["rows_within_target"] + summary["range_rows_holding"]


def judgement(row: dict) -> str:
    """What a row was judged: refused, no model, right or wrong (a point or a range)."""
    if row["predicted_ratio"] == "refused":
        return "refused"
    if row["within_target"] is None and row["range_holds"] is None:
        return "no model"
    return "right" if row["within_target"] or row["range_holds"] else "wrong"


def _tally(rows) -> dict[str, int]:
    """Each judgement's count, and apart those of the rows where the lever changed the step beyond the target's
    floor (2%): what a prediction is for."""
    out: dict[str, int] = {}
    for r in rows:
        for key in (judgement(r),) + ((f"changing {judgement(r)}",) if abs(1 - r["realized_ratio"]) > 0.02 else ()):
            out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def compare(before: dict, after: dict) -> dict:
    rows = {(r["program"], r["lever"]): r for r in before["rows"]}
    changed = [{"program": r["program"], "lever": r["lever"], "realized_ratio": r["realized_ratio"],
                "before": judgement(rows[r["program"], r["lever"]]), "after": judgement(r)}
               for r in after["rows"] if (r["program"], r["lever"]) in rows
               and judgement(rows[r["program"], r["lever"]]) != judgement(r)]
    refused = {c["program"]: c["refused"] for c in after["captures"] if not c["reproduced"]}
    newly = {c["program"] for c in before["captures"] if c["reproduced"]} & set(refused)
    return {"judged_before": {"newly_refused": _tally(r for r in before["rows"] if r["program"] in newly),
                              "the_rest": _tally(r for r in before["rows"] if r["program"] not in newly)},
            "before": {k: before["summary"][k] for k in COUNTS} | {"right": right(before["summary"])},
            "after": {k: after["summary"][k] for k in COUNTS} | {"right": right(after["summary"])},
            "before_commit": before["provenance"]["analysed"]["commit"],
            "after_commit": after["provenance"]["analysed"]["commit"],
            "refused_after": refused, "changed_rows": changed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--what", required=True, help="the change, in words")
    ap.add_argument("--set", nargs=3, action="append", required=True, metavar=("NAME", "BEFORE", "AFTER"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sets = {}
    for name, b, a in args.set:
        before, after = (json.loads(Path(p).read_text()) for p in (b, a))
        sets[name] = {"before_file": Path(b).name, "after_file": Path(a).name} | compare(before, after)
    total = {part: {} for part in ("newly_refused", "the_rest")}
    for s in sets.values():
        for part, counts in s["judged_before"].items():
            for k, n in counts.items():
                total[part][k] = total[part].get(k, 0) + n
    doc = {"what": args.what, "command": "python bench/summarize/whatif_compare.py", "sets": sets,
           "judged_before_every_set": {part: dict(sorted(c.items())) for part, c in total.items()},
           "right": {"before": sum(s["before"]["right"] for s in sets.values()),
                     "after": sum(s["after"]["right"] for s in sets.values())}}
    write_json(args.out, doc)
    for name, s in sets.items():
        print(f"{name}: right {s['before']['right']} -> {s['after']['right']}, refused rows "
              f"{s['before']['rows_refused']} -> {s['after']['rows_refused']}; changed: "
              + ", ".join(f"{c['program']} {c['lever']} {c['before']}->{c['after']}" for c in s["changed_rows"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
