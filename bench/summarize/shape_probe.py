"""The shape probe (bench/device/shape_probe.py) in figures: per program and variant the steps of both rounds
pooled (median, min, max, n) and their median over the plain runs' (the ratio), and, from its doctor captures of
each program plain and under shape (auto), every compute kernel's median duration in both with the dynamic shared
memory the interposer gave it: where shape's time went.

  python bench/summarize/shape_probe.py bench/results/shape-probe-2026-12-07-h100.json \
      --out bench/results/shape-probe-2026-12-07-h100-summary.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path

from ccoverlap.analysis.model import KernelClass
from ccoverlap.analysis.reader import read_trace
from ccoverlap.gpu.provenance import source_commit
from ccoverlap.util.inputs import extracted
from ccoverlap.util.output import write_json

#: kernels shorter than this (us, median plain) are left out of the per-kernel table: launch-bound, not shape's
MIN_US = 5.0


def pooled(runs: list[dict]) -> dict[str, dict]:
    """variant -> its steps over every round: median, min, max, n, and the median's ratio to plain's."""
    by: dict[str, list[float]] = {}
    for r in runs:
        by.setdefault(r["variant"], []).extend(r["samples_ms"] or [])
    plain = statistics.median(by["plain"])
    return {v: {"median_ms": statistics.median(s), "min_ms": min(s), "max_ms": max(s), "n": len(s),
                "ratio": statistics.median(s) / plain} for v, s in by.items() if s}


def kernels(folder: Path) -> dict[str, tuple[list[float], set[int]]]:
    """'name [grid]' -> (durations in us, dynamic shared memory seen) of the capture's compute kernels."""
    trace = read_trace(next(folder.glob("rank0_trace.json.gz")))
    out: dict[str, tuple[list[float], set[int]]] = {}
    for k in trace.kernels:
        if k.kind is KernelClass.COMPUTE and k.footprint is not None:
            durs, smem = out.setdefault(f"{k.name[:80]} [{k.footprint.grid}]", ([], set()))
            durs.append(k.dur)
            smem.add(k.footprint.dynamic_smem)
    return out


def compared(root: Path, program: str) -> list[dict]:
    plain, auto = (kernels(root / f"doctor-{program}-{v}") for v in ("plain", "auto"))
    rows = []
    for name, (durs, smem) in plain.items():
        if name not in auto or statistics.median(durs) < MIN_US:
            continue
        a = statistics.median(auto[name][0])
        rows.append({"kernel": name, "plain_us": statistics.median(durs), "auto_us": a,
                     "ratio": a / statistics.median(durs), "launches": len(durs),
                     "auto_dynamic_smem": sorted(auto[name][1]), "plain_dynamic_smem": sorted(smem)})
    return sorted(rows, key=lambda r: -(r["auto_us"] - r["plain_us"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("probe", type=Path, help="shape_probe.py's JSON; its -files.tgz beside it")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    probe = json.loads(args.probe.read_text())
    programs = {}
    with extracted(args.probe.with_name(args.probe.name.replace(".json", "-files.tgz"))) as root:
        for name, p in probe["programs"].items():
            programs[name] = {"variants": pooled(p["runs"]), "kernels": compared(root, name)}
    write_json(args.out, {"what": __doc__.split("\n\n")[0].replace("\n", " "), "probe": args.probe.name,
                          "provenance": {"measured": probe["provenance"],
                                         "analysed": {"command": "python bench/summarize/shape_probe.py",
                                                      "commit": source_commit(),
                                                      "machine": f"CPU ({platform.machine()}), no GPU"}},
                          "programs": programs})
    for name, p in programs.items():
        print(name, {v: round(s["ratio"], 3) for v, s in p["variants"].items()})
        for r in p["kernels"][:4]:
            print(f"  {r['plain_us']:8.1f} -> {r['auto_us']:8.1f} us  {r['auto_dynamic_smem']}  {r['kernel'][:70]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
