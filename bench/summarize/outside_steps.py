"""How well the doctor's steps outside its windows measure the program's own step: every recorded known-answer
capture's outside steps (their GPU times' median) against the same program's plain runs (the record's realized
plain median), under the rule as it stood before `after_window`, with the step after a window left out, and with
the program's first timed step left out too.

  python bench/summarize/outside_steps.py --out bench/results/outside-steps-DATE.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"

from ccoverlap.doctor import record  # noqa: E402
from ccoverlap.gpu import provenance  # noqa: E402

WITHIN = 0.05


def rules(rec: record.RankRecord) -> dict[str, list[record.Step]]:
    """The outside steps under each rule: as before `after_window`, with it (Step.outside), and the doctor's
    (RankRecord.steady: the program's first timed step left out too)."""
    return {"before": [s for s in rec.steps if not (s.profiled or s.warmup or s.alone)],
            "after_window": [s for s in rec.steps if s.outside], "after_window_and_first": rec.steady}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    rows = []
    for run in sorted(RESULTS.glob("known-answers-*-h*.json")):
        files = run.with_name(run.stem + "-files.tgz")
        if not files.exists():
            continue
        programs = json.loads(run.read_text()).get("programs", {})
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(files) as tar:
                tar.extractall(tmp, filter="data")
            for folder in sorted(q for q in Path(tmp).glob("doctor-*") if q.is_dir()):
                program = folder.name.removeprefix("doctor-").split("@")[0]
                plain = ((programs.get(program) or {}).get("realized") or {}).get("plain_median_ms")
                records, _ = record.read_all(folder)
                if not plain or not records:
                    continue
                row = {"run": run.name, "program": program, "plain_median_ms": plain}
                for name, steps in rules(records[0]).items():
                    gpu = [s.gpu_ms for s in steps if s.gpu_ms is not None]
                    row[name] = {"steps": [s.step for s in steps], "gpu_median_ms": statistics.median(gpu) if gpu
                                 else None}
                rows.append(row)
    summary = {}
    for name in ("before", "after_window", "after_window_and_first"):
        errors = [abs(r[name]["gpu_median_ms"] / r["plain_median_ms"] - 1) for r in rows if r[name]["gpu_median_ms"]]
        summary[name] = {"captures": len(errors), "within_5pct": sum(e <= WITHIN for e in errors),
                         "median_abs_error": statistics.median(errors), "max_abs_error": max(errors)}
        print(name, summary[name], file=sys.stderr)
    a.out.write_text(json.dumps({"what": __doc__.split("\n\n")[0], "provenance": provenance.collect(),
                                 "summary": summary, "captures": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
