"""The record of bench/device/hold_doctor.sh: per program the doctor with its hold (--hold on) and without, each
folder analysed again at this commit and judged (bench/device/known_answers.py's targets) against the gains its
program realized in the held-out runs; the verdict printed on the device kept beside.

  python bench/summarize/hold_doctor.py OUT_DIR --command "..." --out bench/results/hold-doctor-DATE-GPU.json
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "device"))
from known_answers import CASES, analysed, judge, recorded_realization, view  # noqa: E402

from ccoverlap.gpu.provenance import source_commit  # noqa: E402

#: where the held-out programs' gains were realized (one H100, plain runs beside every lever)
REALIZED = "known-answers-heldout-2026-12-06-*-h100.json"


def idle_share(folder: Path) -> float | None:
    """The GPU's idle share of the median typical step of rank 0's trace."""
    from ccoverlap.analysis.steps import shapes, typical
    from ccoverlap.analysis.reader import read_trace

    steps = shapes(read_trace(folder / "rank0_trace.json.gz"))
    shares = [steps[i].idle_us / steps[i].span_us for i in typical(steps).typical if steps[i].span_us > 0]
    return round(statistics.median(shares), 4) if shares else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", type=Path)
    p.add_argument("--command", required=True)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    log = (a.out_dir / "log").read_text()
    walls = {m[1]: int(m[3]) for m in re.finditer(r"^(\S+@hold-(on|off)) exit \d+ in (\d+) s$", log, re.M)}
    runs = {}
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(a.out_dir / "hold-doctor-files.tgz") as tar:
        tar.extractall(tmp, filter="data")
        for path in sorted(Path(tmp).glob("doctor-*.json")):
            tag = path.stem.removeprefix("doctor-")
            program = tag.split("@")[0]
            doc = json.loads(path.read_text())
            times = (doc.get("step_times") or [{}])[0]
            got = analysed(path.with_suffix(""))
            real, where = recorded_realization(REALIZED, program)
            runs[tag] = {
                "exit_code": doc.get("exit_code"), "wall_s": walls.get(tag), "hold": times.get("hold"),
                "hold_note": times.get("hold_note"),
                "outside_gpu_ms": times.get("outside_gpu_ms"), "profiled_gpu_ms": times.get("profiled_gpu_ms"),
                "typical_idle_share": idle_share(path.with_suffix("")), "verdict": got["verdict"],
                "on_device": {"verdict": view(doc)["verdict"]},
                "recommendations": [{"lever": r["lever"], "gain_ms": r["gain_ms"]}
                                    for r in got["recommendations"] or []],
                "realized_in": where, "judged": judge(CASES[program], real, got) if real and program in CASES else None}
    for run in runs.values():
        judged = run["judged"]
        run["all_targets_met"] = None if not judged else all(v for k, v in judged.items() if k.endswith("_target_met"))
    doc = {"what": "ccoverlap doctor with its hold before each profiled step (--hold on) and without (--hold off), on "
                   "held-out programs; the folders in the -files.tgz beside",
           "provenance": json.loads((a.out_dir / "provenance.json").read_text()) | {"command": a.command},
           "analysed_at": source_commit(),
           "gpu_tests": (a.out_dir / "pytest-hold.log").read_text().strip().splitlines()[-1:],
           "runs": runs, "log": log.splitlines()}
    a.out.write_text(json.dumps(doc, indent=1) + "\n")
    for tag, run in runs.items():
        print(f"{tag}: targets {run['all_targets_met']}, idle {run['typical_idle_share']}, "
              f"{(run['verdict'] or '')[:90]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
