"""The what-if simulator against the bench's emulated workloads (issue 23, run 2: bench/device/whatif_bench.sh).

For each bus bandwidth: the doctor's capture of `python -m ccoverlap.bench.train ddp` is simulated under each
strategy the bench measured (the pace shipped for the H200: nothing is fitted here), and the prediction is
anchored to the bench's measured default (predicted step = measured default x predicted / predicted default),
so host time the simulator does not see cancels. Compared: each strategy's predicted step with the measured
median (target: within 5%), and the predicted ranking with the measured one where the bench's 95% interval of
the ratio to default excludes 1 (a difference beyond the noise). Writes one JSON row per (busbw, strategy).

Derived per row: `simulated_step_error` (the simulated step, not anchored, against the measured median) and
`link_bound_error` (the link-bound end against the measured median); --derive adds them to a written record
without simulating again.

usage: python bench/summarize/whatif_bench.py --dir bench/results/whatif-bench-2026-12-02-h200 --out OUT.json
       python bench/summarize/whatif_bench.py --derive OUT.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import tarfile
import tempfile
from pathlib import Path

from ccoverlap.control import levers
from ccoverlap.gpu.provenance import source_commit
from ccoverlap.util.output import write_json
from ccoverlap.whatif import calibration, predict, session

TARGET = 0.05


def one(root: Path, bench: dict, busbw: str) -> list[dict]:
    rows = {r["strategy"]: r for r in bench["rows"] if r["status"] == "ok"}
    cap = session.capture(root, comm_regex="^comm_paced$")
    cal, _ = calibration.load(cap.step.device.name)
    strategies = [levers.strategy(s) for s in rows if s != levers.DEFAULT]
    preds = {p.strategy: p for p in predict.predict(cap.step, strategies, cal)}
    base = preds[levers.DEFAULT]
    out = []
    for name, r in rows.items():
        p = preds[name]
        entry = {"busbw_gbps": float(busbw), "workload": r["workload"], "lever": name, "measured_ms": r["step_ms"],
                 "measured_ms_min": r["step_ms_min"], "measured_ms_max": r["step_ms_max"],
                 "measured_vs_default": (r.get("vs_default") or {}).get("ratio",
                                                                        1.0 if name == levers.DEFAULT else None),
                 "measured_ci": (r.get("vs_default") or {}).get("ci"),
                 "verdict": (r.get("vs_default") or {}).get("verdict"),
                 "status": p.status, "simulated_step_ms": p.step_us / 1000 if p.step_us else None}
        if p.status == "ok":
            entry["predicted_vs_default"] = p.vs(base)
            entry["predicted_ms"] = rows[levers.DEFAULT]["step_ms"] * p.vs(base)
            entry["error"] = entry["predicted_ms"] / r["step_ms"] - 1
            entry["within_target"] = abs(entry["error"]) <= TARGET
            if p.link_bound_step_us:  # the other end: collectives bound by their link
                entry["predicted_link_bound_ms"] = rows[levers.DEFAULT]["step_ms"] * p.link_bound_step_us / base.step_us
        out.append(entry)
    return out


def derive(rows: list[dict]) -> list[dict]:
    """Each row with its errors against the measured median: the simulated step's and the link-bound end's."""
    for r in rows:
        if r.get("simulated_step_ms") is not None:
            r["simulated_step_error"] = r["simulated_step_ms"] / r["measured_ms"] - 1
        if r.get("predicted_link_bound_ms") is not None:
            r["link_bound_error"] = r["predicted_link_bound_ms"] / r["measured_ms"] - 1
    return rows


def rewrite(path: Path, record: dict) -> None:
    """A written record again, in its own layout (indented or not), its measurements untouched."""
    text = path.read_text()
    path.write_text(json.dumps(record, indent=1 if text.startswith("{\n") else None)
                    + ("\n" if text.endswith("\n") else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--derive", type=Path, nargs="+", metavar="OUT.json",
                    help="add the derived fields to written records, and stop")
    args = ap.parse_args()
    if args.derive:
        for path in args.derive:
            record = json.loads(path.read_text())
            derive(record["rows"])
            rewrite(path, record)
        return 0
    if not (args.dir and args.out):
        ap.error("--dir and --out are needed (or --derive)")
    rows, provenance = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for tgz in sorted(args.dir.glob("ddp-*.tgz")):
            busbw = tgz.name.removeprefix("ddp-").removesuffix(".tgz")
            bench_path = args.dir / f"bench-ddp-{busbw}.json"
            if not bench_path.exists():
                print(f"{busbw} GB/s: no bench record, skipped")
                continue
            with tarfile.open(tgz) as tar:
                tar.extractall(tmp, filter="data")
            bench = json.loads(bench_path.read_text())
            provenance[busbw] = bench["provenance"]
            rows += one(Path(tmp) / f"ddp-{busbw}", bench, busbw)
    derive(rows)
    ranked = {}
    for busbw in sorted({r["busbw_gbps"] for r in rows}):
        mine = [r for r in rows if r["busbw_gbps"] == busbw and r["status"] == "ok"]
        beyond = [r for r in mine if r["measured_ci"] and not r["measured_ci"][0] <= 1 <= r["measured_ci"][1]]
        ranked[str(busbw)] = {
            "beyond_noise": [r["lever"] for r in beyond],
            "same_side_of_default": all((r["measured_vs_default"] < 1) == (r["predicted_vs_default"] < 1)
                                        for r in beyond)}
    result = {"provenance": {"measured": provenance, "predicted_at_commit": source_commit(),
                             "date": dt.datetime.now(dt.timezone.utc).isoformat(),
                             "method": __doc__.split("\n\n")[1].replace("\n", " ")},
              "ranking": ranked, "rows": rows}
    write_json(args.out, result, indent=1)
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['busbw_gbps']:5g} {r['lever']:28} {r['status']}")
            continue
        print(f"{r['busbw_gbps']:5g} {r['lever']:28} measured {r['measured_ms']:7.2f} "
              f"({r['measured_vs_default']:.3f}x, {r['verdict']}) predicted {r['predicted_ms']:7.2f} "
              f"({r['predicted_vs_default']:.3f}x) {100 * r['error']:+5.1f}%  "
              f"simulated step {r['simulated_step_ms']:.2f}"
              + (f"  link-bound {r['predicted_link_bound_ms']:.2f}" if "predicted_link_bound_ms" in r else ""))
    print(json.dumps(ranked))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
