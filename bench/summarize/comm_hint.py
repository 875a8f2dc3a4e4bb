"""Issue 27's graph_dispatch extra wave, measured: is it the collective's shared-memory configuration? From the
archive of `bash bench/device/comm_hint.sh` (runs/NAME.json: each run's step times and losses; the doctor folders).

  python bench/summarize/comm_hint.py comm-hint-files.tgz --runs-commit SHA \
      --out bench/results/comm-hint-DATE-h200.json [--without bench/results/graph-priority-2026-12-04-h200.json]

Per program and setting (a strategy, with or without the collective's carveout hint at 100, or a lever): the step
times of every run (each run's own warm-up already left out by the program), their median, min and max, and
whether the losses are bitwise those of the program's plain runs. From the doctor with priority and the hint: where
the typical steps' kernels ran (graph_priority.step_figures), beside the same figures without the hint (--without,
the recorded graph-priority run). From the other doctors: their headline (what a lever reaches, the first lever).
Nothing is fitted; the figures are the runs' and the traces'.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from ccoverlap.util.inputs import extracted
from ccoverlap.util.output import write_json

sys.path.insert(0, str(Path(__file__).resolve().parent))
import graph_priority  # noqa: E402 (the step figures of a doctor folder, one definition)

NAME = re.compile(r"^(?P<program>[a-z_]+?)-(?P<setting>.+)-(?P<rep>\d+)$")


def runs(folder: Path) -> dict:
    """program -> setting -> {median_ms, min_ms, max_ms, runs: [step times], losses_as_plain}."""
    out: dict[str, dict[str, dict]] = {}
    losses: dict[tuple[str, str], list[str]] = {}
    for f in sorted(folder.glob("*.json")):
        m = NAME.match(f.stem)
        doc = json.loads(f.read_text())
        row = out.setdefault(m["program"], {}).setdefault(m["setting"], {"runs": []})
        row["runs"].append(doc["steps_ms"])
        losses[(m["program"], f.stem)] = doc["losses"]
    for program, settings in out.items():
        plain = next((v for (p, stem), v in losses.items() if p == program and "-default-hint_none-" in stem), None)
        for setting, row in settings.items():
            steps = [t for r in row["runs"] for t in r]
            row |= {"median_ms": statistics.median(steps), "min_ms": min(steps), "max_ms": max(steps),
                    "losses_as_plain": None if plain is None else all(
                        v == plain for (p, stem), v in losses.items()
                        if p == program and stem.startswith(f"{program}-{setting}-"))}
    return out


def headline(path: Path) -> dict:
    """A doctor's JSON: its rank-0 verdict line, what a lever reaches, the first lever."""
    doc = json.loads(path.read_text())
    rank = doc["analysis"]["ranks"][0]
    recs = rank.get("recommendations") or []
    return {"verdict": rank.get("verdict"), "lever_headroom_ms": rank.get("lever_headroom_ms"),
            "headroom_ms": rank.get("scheduling_headroom_ms"), "first_lever": recs[0]["lever"] if recs else None,
            "commit": doc["provenance"]["commit"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("archive", type=Path, help="comm_hint.sh's $OUT/comm-hint-files.tgz")
    ap.add_argument("--runs-commit", required=True, help="the commit the call ran at")
    ap.add_argument("--without", type=Path, help="graph_priority.py's record: the grid's figures without the hint")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    with extracted(args.archive) as root:
        doctor = json.loads((root / "doctor-graph_dispatch-hint_100.json").read_text())
        hinted = graph_priority.program(root / "doctor-graph_dispatch-hint_100")
        doctors = {f.stem.removeprefix("doctor-"): headline(f) for f in sorted(root.glob("doctor-*.json"))
                   if f.stem != "doctor-graph_dispatch-hint_100"}
        measured = runs(root / "runs")
    doc = {"what": __doc__.split("\n\n")[0].replace("\n", " "),
           "provenance": doctor["provenance"] | {
               "command": f"CCOVERLAP_COMMIT={args.runs_commit} bash bench/device/comm_hint.sh",
               "summarized": "python bench/summarize/comm_hint.py", "commit": args.runs_commit},
           "runs": measured,
           "graph_dispatch_priority_hint_100": hinted}
    if args.without:
        doc["graph_dispatch_priority_without_hint"] = json.loads(args.without.read_text())["programs"]["graph_dispatch"]
        doc["without_from"] = args.without.name
    if doctors:
        doc["doctors"] = doctors
    write_json(str(args.out), doc)
    for program, settings in measured.items():
        for setting, row in settings.items():
            print(f"{program} {setting}: {row['median_ms']:.3f} ms [{row['min_ms']:.3f}-{row['max_ms']:.3f}], "
                  f"losses as plain: {row['losses_as_plain']}", file=sys.stderr)
    print("grid with the hint:", round(hinted["median"]["grid_us"], 1), "us", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
