"""Every recorded known-answer doctor capture judged again at this commit, on the CPU: each doctor folder of the
records' -files.tgz analysed as `ccoverlap doctor` does, its verdict judged (bench/device/known_answers.py's
targets) against the gains its own record realized (REALIZED_ELSEWHERE: a capture recorded apart). With --before
(an earlier output of this script) the verdicts that changed are listed.

  python bench/summarize/doctor_rejudge.py --out bench/results/doctor-rejudge-DATE.json [--before OLD.json]

To judge an older commit, run this file with PYTHONPATH pointing at that commit's src/ (its analysis, these
targets).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO / "bench" / "device"))
from known_answers import CASES, analysed, judge, recorded_realization  # noqa: E402

import ccoverlap  # noqa: E402
from ccoverlap.gpu import provenance  # noqa: E402

#: the recorded captures: every known-answers run with its folders, and the doctor run again on held-out programs
CAPTURES = sorted(p.name.removesuffix("-files.tgz") for p in RESULTS.glob("known-answers-*-files.tgz")
                  if "tune" not in p.name) + ["queued-doctor-2026-12-06-h100", "hold-doctor-2026-12-06-h100",
                                               "hold-doctor-2026-12-07-h100", "hold-doctor-2026-12-07b-h100",
                                               "hold-doctor-2026-12-07c-h100"]


#: captures recorded apart from the runs that realized their programs' gains (the programs unchanged between); the
#: doctor's hold as shipped (hold-doctor-2026-12-06-h100: its first placement, at 8b0d811, held no step as it does now)
REALIZED_ELSEWHERE = {"queued-doctor-2026-12-06-h100": "known-answers-heldout-2026-12-06-*-h100.json",
                      "hold-doctor-2026-12-06-h100": "known-answers-heldout-2026-12-06-*-h100.json",
                      "hold-doctor-2026-12-07-h100": "known-answers-heldout-2026-12-07-*-h100.json",
                      "hold-doctor-2026-12-07b-h100": "known-answers-heldout-2026-12-0[67]-*-h100.json",
                      "hold-doctor-2026-12-07c-h100": "known-answers-heldout-2026-12-07-*-h100.json"}


def _realized(stem: str, program: str) -> tuple[dict | None, str | None]:
    """The program's realized gains: its own record's, or for a capture recorded apart, the run's that realized it."""
    return recorded_realization(REALIZED_ELSEWHERE.get(stem, f"{stem}.json"), program)


def rejudge(work: Path) -> dict:
    out = {}
    for stem in CAPTURES:
        with tarfile.open(RESULTS / f"{stem}-files.tgz") as tar:
            tar.extractall(work / stem, filter="data")
        for folder in sorted(p for p in (work / stem).glob("doctor-*") if p.is_dir()):
            program = folder.name.removeprefix("doctor-").split("@")[0]
            got = analysed(folder)
            real, where = _realized(stem, program)
            judged = judge(CASES[program], real, got) if real and program in CASES else None
            out[f"{stem}/{folder.name}"] = {
                "verdict": got["verdict"], "realized_in": where,
                "recommendations": [{"lever": r["lever"], "gain_ms": r["gain_ms"]}
                                    for r in got["recommendations"] or []],
                "judged": judged,
                "all_targets_met": None if not judged else all(v for k, v in judged.items()
                                                               if k.endswith("_target_met"))}
            print(f"{stem}/{folder.name}: {(got['verdict'] or '')[:100]}", file=sys.stderr)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--before", type=Path, help="an earlier output of this script: list what changed against it")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        captures = rejudge(Path(tmp))
    judged = [c for c in captures.values() if c["all_targets_met"] is not None]
    src = Path(ccoverlap.__file__).parent
    analysed_at = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    doc = {"what": __doc__.split("\n\n")[0], "provenance": provenance.collect(),
           "analysis": {"src": str(src), "commit": analysed_at.strip() or None}, "captures": captures,
           "judged": len(judged), "all_targets_met": sum(c["all_targets_met"] for c in judged)}
    if a.before:
        before = json.loads(a.before.read_text())
        doc["before"] = {"file": a.before.name, "commit": (before.get("analysis") or {}).get("commit"),
                         "all_targets_met": before["all_targets_met"], "judged": before["judged"]}
        doc["changed"] = {k: {"before": before["captures"][k], "after": v} for k, v in captures.items()
                          if k in before["captures"] and before["captures"][k]["verdict"] != v["verdict"]}
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{doc['all_targets_met']} of {doc['judged']} judged captures meet every target", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
