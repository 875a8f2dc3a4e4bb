"""`ccoverlap whatif` on the known-answer programs' recorded doctor captures (issue 23's target "the predicted best
lever is the realized best, and its predicted gain within 25%"), on the CPU from recorded H200 files.

  python bench/summarize/whatif_known.py --realized RUN.json... --folders DIR... --out OUT.json

RUN.json: bench/device/known_answers.py's summaries (either layout: run 1's `realized_best_*` fields or later runs'
`realized` object); DIR: folders holding `doctor-<program>/` (the doctor's capture: traces and alone windows).
The realized gain is the difference of median steps (plain vs the best lever); the predicted gain is the
simulator's share of the step times the plain median. A gain under 2% of the step is "nothing" on both sides.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ccoverlap.gpu import provenance
from ccoverlap.util.output import write_json
from ccoverlap.whatif import session
from ccoverlap.whatif.config import WhatIfConfig

NOTHING = 0.02  # the "nothing to gain" threshold, as the doctor's


def realized(doc: dict) -> dict[str, dict]:
    """program -> {plain_ms, best, gain_ms, levers: {strategy: ratio}} from a known-answers summary."""
    out = {}
    for name, p in doc["programs"].items():
        r = p.get("realized") or (p if "plain_median_ms" in p else None)
        if not r:
            continue
        plain = r.get("plain_median_ms")
        best = r.get("best_lever", r.get("realized_best_lever"))
        gain = r.get("best_gain_ms", r.get("realized_best_gain_ms")) or 0.0
        out[name] = {"plain_ms": plain, "best": best if best and gain >= NOTHING * plain else None, "gain_ms": gain,
                     "ratios": {k: v["ratio"] for k, v in r["levers"].items()}}
    return out


def predicted(folder: Path, strategies: list[str]) -> dict:
    """strategy -> predicted share of the step gained, for exactly the strategies the realized run measured."""
    rows = session.run(WhatIfConfig(levers=tuple(strategies)).validate(), folder)["predictions"]
    return {p["strategy"]: 1 - p["vs_capture"] for p in rows if p["status"] == "ok" and p["strategy"] in strategies}


def judge(real: dict, tried: dict) -> dict:
    """The issue's target for one program, against the levers the realized run measured."""
    best = max(tried, key=tried.get) if tried else None
    gain = tried.get(best, 0.0) if best else 0.0
    best = best if gain >= NOTHING else None
    pred_ms = gain * real["plain_ms"]
    out = {"realized_best": real["best"], "realized_gain_ms": real["gain_ms"], "predicted_best": best,
           "predicted_gain_ms": pred_ms, "predicted_share": gain, "predicted_by_lever": tried}
    if real["best"] is None:
        out["best_met"] = best is None
        out["gain_met"] = best is None
    else:
        out["best_met"] = best == real["best"] or (best is not None and real["ratios"].get(best, 2) <=
                                                    real["ratios"][real["best"]] + 0.005)
        out["gain_met"] = abs(pred_ms - real["gain_ms"]) <= 0.25 * real["gain_ms"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--realized", type=Path, nargs="+", required=True)
    ap.add_argument("--folders", type=Path, nargs="+", required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    real = {}
    for path in a.realized:
        real |= realized(json.loads(path.read_text()))
    rows = []
    for name, r in sorted(real.items()):
        folder = next((f / f"doctor-{name}" for f in a.folders if (f / f"doctor-{name}").is_dir()), None)
        if folder is None:
            rows.append({"program": name, "skipped": "no doctor capture among --folders"})
            continue
        row = {"program": name, "capture": str(folder), "plain_ms": r["plain_ms"],
               **judge(r, predicted(folder, list(r["ratios"])))}
        rows.append(row)
        print(f"{name}: realized {r['best']} {r['gain_ms']:.3f} ms; predicted {row['predicted_best']} "
              f"{row['predicted_gain_ms']:.3f} ms; best {'met' if row['best_met'] else 'missed'}, gain "
              f"{'met' if row['gain_met'] else 'missed'}", file=sys.stderr)
    write_json(a.out, {"provenance": provenance.collect(), "what": __doc__.split("\n\n")[0],
                       "realized_from": [str(p) for p in a.realized], "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
