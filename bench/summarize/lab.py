"""Markdown summary of a lab results file (for docs/results.md): best strategy per case and the issue's targets.

usage: python bench/summarize/lab.py bench/results/lab-2026-11-30-h200.json
"""
from __future__ import annotations

import json
import sys


def _ok(doc: dict) -> list[dict]:
    return [r for r in doc["rows"] if r["status"] == "ok"]


def render_cases(docs: list[dict]) -> str:
    """Per compute + proxy case of one lab record: alone, sequential, ideal, the best strategy and priority's."""
    (doc,) = docs
    ok = _ok(doc)
    out = ["| compute + proxy | alone: compute / comm (ms) | sequential | ideal | best total (strategy, order) | E "
           "| its comm done (x alone) | priority, best order: total / comm x |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for compute, comm in sorted({(r["compute"], r["comm"]) for r in doc["rows"]}):
        mine = [r for r in ok if (r["compute"], r["comm"]) == (compute, comm)
                and r["strategy"] not in ("compute-alone", "comm-alone")]
        c = mine[0]
        ideal = max(c["compute_alone_ms"], c["comm_alone_ms"])
        best = min(mine, key=lambda r: r["total_ms"])
        pri = min((r for r in mine if r["strategy"] == "priority"), key=lambda r: r["total_ms"])
        out.append(f"| {compute} + {comm} | {c['compute_alone_ms']:.2f} / {c['comm_alone_ms']:.2f} "
                   f"| {c['sequential_ms']:.2f} | {ideal:.2f} "
                   f"| {best['total_ms']:.2f} ({best['strategy']}, {best['order']}) | {best['efficiency']:.2f} "
                   f"| {best['comm_done_ms']:.2f} ({best['comm_done_ms'] / c['comm_alone_ms']:.2f}x) "
                   f"| {pri['total_ms']:.2f} / {pri['comm_done_ms'] / c['comm_alone_ms']:.2f}x |")
    return "\n".join(out)


def render_orders(docs: list[dict]) -> str:
    """Per launch order, fma and elementwise against the nccl proxy under the strategies the targets are about."""
    (doc,) = docs
    out = ["| case | strategy | order | total / ideal | comm done / alone | compute slowdown | pad (B) | blocks/SM |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for compute in ("fma", "elementwise"):
        for r in _ok(doc):
            if r["compute"] == compute and r["comm"] == "nccl" and r["strategy"] in (
                    "priority", "priority+shape", "shrink+shape+priority", "green"):
                ideal = max(r["compute_alone_ms"], r["comm_alone_ms"])
                out.append(f"| {compute} + nccl | {r['strategy']} | {r['order']} | {r['total_ms'] / ideal:.3f} | "
                           f"{r['comm_done_ms'] / r['comm_alone_ms']:.2f} | {r['compute_slowdown']:.2f} | "
                           f"{r['pad_bytes']} | {r.get('compute_blocks_per_sm', '-')} |")
    return "\n".join(out)


#: the library-kernel table's rows: (compute, index of the record among the marker's files, label)
LIBRARY_ROWS = (("gemm", 0, "gemm"), ("transformer", 0, "transformer"), ("transformer", 1, "transformer, no cap"),
                ("attention", 0, "attention"))
LIBRARY_STRATEGIES = ("naive", "priority", "shape", "priority+shape", "carveout", "green")


def render_library(docs: list[dict]) -> str:
    """Total ms (E) per strategy of the library kernels shaped through the interposer, one quick run a record."""
    out = ["| compute | sequential | " + " | ".join(LIBRARY_STRATEGIES) + " |",
           "| --- |" + " --- |" * (len(LIBRARY_STRATEGIES) + 1)]
    for compute, i, label in LIBRARY_ROWS:
        mine = {r["strategy"]: r for r in docs[i]["rows"] if r["compute"] == compute}
        cells = [f"{r['total_ms']:.2f} ({r['efficiency']:.2f})" if r["status"] == "ok" else r["status"].split(":")[0]
                 for r in (mine[s] for s in LIBRARY_STRATEGIES)]
        out.append(f"| {label} | {mine['sequential']['total_ms']:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(path: str) -> None:
    docs = [json.load(open(path))]
    print(render_cases(docs))
    print()
    print("Per order, fma and elementwise against the nccl proxy "
          "(target: total <= 1.05 x ideal and comm <= 1.25 x alone):")
    print()
    print(render_orders(docs))


if __name__ == "__main__":
    main(sys.argv[1])
