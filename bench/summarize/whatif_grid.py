"""The pace fit's grid widened (docs/whatif.md, "Calibration": two of the three pace parameters landed on its edge):
every point of a wider grid predicted on the lab's recorded cells, in sample, with its mean error (the fit's loss)
and the cells within 10% on both the total and the comm completion. Nothing shipped changes; this says whether the
edge binds.

  python bench/summarize/whatif_grid.py --out bench/results/whatif-lab-wider-grid-DATE.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import whatif as lab  # noqa: E402

from ccoverlap.gpu.provenance import source_commit  # noqa: E402
from ccoverlap.util.inputs import extracted  # noqa: E402
from ccoverlap.util.output import write_json  # noqa: E402
from ccoverlap.whatif import calibration, session  # noqa: E402
from ccoverlap.whatif.duration import Pace  # noqa: E402

RECORD = Path(__file__).resolve().parents[1] / "results" / "whatif-2026-12-02-h200"
SM_SHARES, MEMORY_SHARES, SATURATIONS = (1.0, 1.5, 2.0, 3.0), (0.2, 0.3, 0.4), (0.0, 0.125, 0.25)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    record = json.loads((RECORD / "lab-quick.json").read_text())
    capture = json.loads((RECORD / "whatif-capture.json").read_text())
    with extracted(RECORD / "traces.tgz") as root:
        cases = session.lab_cases(record, capture, root, lab._device(capture))
    law = calibration.fit_law(capture["comm_sweep"])
    points = []
    for sm in SM_SHARES:
        for mem in MEMORY_SHARES:
            for sat in SATURATIONS:
                # the fit's own loss (calibration.fit_pace: the mean error over each cell's total and comm
                # completion, lab._pairs's order), and the cells whose two errors are both within the target
                errors = calibration.errors(lab._pairs(lab._cells(cases, Pace(sm, mem, sat), law)))
                within = sum(max(errors[i:i + 2]) <= lab.TARGET for i in range(0, len(errors), 2))
                points.append({"sm_share": sm, "memory_share": mem, "saturation": sat,
                               "mean_abs_error": sum(errors) / len(errors), "cells_within_10pct": within})
                print(points[-1], flush=True)
    best = min(points, key=lambda p: p["mean_abs_error"])
    write_json(args.out, {
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "provenance": {"measured": record["provenance"], "capture": capture["provenance"],
                       "analysed_at_commit": source_commit(), "command": " ".join(sys.argv),
                       "machine": "CPU, no GPU: the lab's recorded cells (bench/results/whatif-2026-12-02-h200/)"},
        "cells": len(errors) // 2, "least_error": best,
        "most_within": max(p["cells_within_10pct"] for p in points), "points": points})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
