"""The carveout validation's disagreements by class (bench/results/carveout-*.json, `ccoverlap occupancy
--validate-carveout`), for docs/results.md: per class of resident kernel, its rows, those where the model
disagreed, and the shared-memory configuration the SM took as measured against the model's.

The measured configuration is bracketed by the newcomers: at least the largest need that started, below the
smallest larger need that waited (the configurations of the device between the two).

usage: python bench/summarize/carveout.py bench/results/carveout-2026-12-01-h200.json
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable

KB = 1024
#: (label, which resident rows, the field its sub-classes differ by, or None): the classes the 197 fell in
CLASSES: tuple[tuple[str, Callable[[dict], bool], str | None], ...] = (
    ("1 KB, hint 25 / 50 / 75", lambda r: r["resident_smem"] == KB and r["resident_hint"] in (25, 50, 75),
     "resident_hint"),
    ("0 KB, 128 or 256 threads, no hint or 0", lambda r: r["resident_smem"] == 0 and r["resident_hint"] in (None, 0)
     and r["resident_threads"] in (128, 256), None),
    ("1 KB, 256 threads, no hint", lambda r: r["resident_smem"] == KB and r["resident_hint"] is None
     and r["resident_threads"] == 256, None),
    ("8 KB, 256 threads, no hint", lambda r: r["resident_smem"] == 8 * KB and r["resident_hint"] is None
     and r["resident_threads"] == 256, None),
)


def measured(rows: list[dict], configs: list[int]) -> str:
    """The configuration the SM took, from which newcomers started: 'N' or 'LO-HI' (KB)."""
    low = max(r["comm_needs_kb"] for r in rows if r["outcome"] == "starts")
    waited = [r["comm_needs_kb"] for r in rows if r["outcome"] == "waits" and r["comm_needs_kb"] > low]
    high = max(c for c in configs if c < min(waited)) if waited else max(configs)
    return f"{low}" if high == low else f"{low}-{high}"


def render_classes(docs: list[dict]) -> str:
    """Per class: rows, disagreements, measured configuration vs the model's (per sub-class, ' / ')."""
    (doc,) = docs
    rows = [dict(zip(doc["columns"], r)) for r in doc["rows"]]
    configs = doc["device_limits"]["smem_configs_kb"]
    out = ["| resident | rows | disagree | measured configuration vs model |", "| --- | --- | --- | --- |"]
    for label, member, split in CLASSES:
        mine = [r for r in rows if member(r)]
        parts = [[r for r in mine if r[split] == v] for v in sorted({r[split] for r in mine})] if split else [mine]
        models = [sorted({r["config_kb"] for r in p if not r["agree"]}, reverse=True) for p in parts]
        model = " / ".join(" or ".join(map(str, m)) for m in models)
        out.append(f"| {label} | {len(mine)} | {sum(not r['agree'] for r in mine)} | "
                   f"{' / '.join(measured(p, configs) for p in parts)} KB vs {model} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(render_classes([json.load(open(sys.argv[1]))]))
