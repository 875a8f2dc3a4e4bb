"""Markdown summary of a lab results file (for docs/results.md): best strategy per case and the issue's targets.

usage: python bench/summarize/lab.py bench/results/lab-2026-11-30-h200.json
"""
from __future__ import annotations

import json
import sys


def main(path: str) -> None:
    rows = json.load(open(path))["rows"]
    ok = [r for r in rows if r["status"] == "ok"]
    cases = sorted({(r["compute"], r["comm"]) for r in rows})
    print("| compute + proxy | alone: compute / comm (ms) | sequential | ideal | best total (strategy, order) | E "
          "| its comm done (x alone) | priority, best order: total / comm x |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for compute, comm in cases:
        mine = [r for r in ok if (r["compute"], r["comm"]) == (compute, comm)
                and r["strategy"] not in ("compute-alone", "comm-alone")]
        c = mine[0]
        ideal = max(c["compute_alone_ms"], c["comm_alone_ms"])
        best = min(mine, key=lambda r: r["total_ms"])
        pri = min((r for r in mine if r["strategy"] == "priority"), key=lambda r: r["total_ms"])
        print(f"| {compute} + {comm} | {c['compute_alone_ms']:.2f} / {c['comm_alone_ms']:.2f} "
              f"| {c['sequential_ms']:.2f} | {ideal:.2f} "
              f"| {best['total_ms']:.2f} ({best['strategy']}, {best['order']}) | {best['efficiency']:.2f} "
              f"| {best['comm_done_ms']:.2f} ({best['comm_done_ms'] / c['comm_alone_ms']:.2f}x) "
              f"| {pri['total_ms']:.2f} / {pri['comm_done_ms'] / c['comm_alone_ms']:.2f}x |")
    print()
    print("Per order, fma and elementwise against the nccl proxy "
          "(target: total <= 1.05 x ideal and comm <= 1.25 x alone):")
    print()
    print("| case | strategy | order | total / ideal | comm done / alone | compute slowdown | pad (B) | blocks/SM |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for compute in ("fma", "elementwise"):
        mine = [r for r in ok if r["compute"] == compute and r["comm"] == "nccl"]
        for r in mine:
            if r["strategy"] in ("priority", "priority+shape", "shrink+shape+priority", "green"):
                ideal = max(r["compute_alone_ms"], r["comm_alone_ms"])
                print(f"| {compute} + nccl | {r['strategy']} | {r['order']} | {r['total_ms'] / ideal:.3f} | "
                      f"{r['comm_done_ms'] / r['comm_alone_ms']:.2f} | {r['compute_slowdown']:.2f} | "
                      f"{r['pad_bytes']} | {r.get('compute_blocks_per_sm', '-')} |")


if __name__ == "__main__":
    main(sys.argv[1])
