"""Markdown tables of `ccoverlap analyze` results files (bench/results/analyze-*.json: provenance and the
analyzer's JSON), for docs/results.md: the strategies' means over ranks, and rank by rank.

usage: python bench/summarize/analyze.py bench/results/analyze-ddp-x2-h200-2026-11-30.json
"""
from __future__ import annotations

import json
import sys

#: the order the bench ran the strategies in (the analyzer's JSON sorts them by name)
ORDER = ("no-overlap", "default", "priority", "shape", "priority+shape", "carveout", "nccl-ctas", "max-connections-1")


def _strategies(analysis: dict) -> list[str]:
    return sorted(analysis["strategies"], key=lambda s: (ORDER.index(s) if s in ORDER else len(ORDER), s))


def _ranks(analysis: dict, strategy: str) -> list[dict]:
    return sorted((r for r in analysis["ranks"] if r["strategy"] == strategy), key=lambda r: r["rank"])


def render_means(docs: list[dict]) -> str:
    """Per strategy, the mean over ranks of overlap, time per kind and slowdowns; padding per rank."""
    (analysis,) = [d["analysis"] for d in docs]
    out = ["| strategy | comp_comm_overlap_pct | communication ms | exposed comm ms | compute ms | idle ms | compute x "
           "| comm x | padded launches / kernels (per rank) |", "| --- |" + " --- |" * 8]
    for s in _strategies(analysis):
        m = analysis["strategies"][s]
        padded = dict.fromkeys(f"{r['padded_launches']} / {len(r['padded_kernels'])}" if r["padded_launches"] else "0"
                               for r in _ranks(analysis, s))
        out.append(f"| {s} | {m['comp_comm_overlap_pct']:.1f} | "
                   + " | ".join(f"{m[k] / 1000:.2f}" for k in ("communication_us", "exposed_comm_us", "compute_us",
                                                                "idle_us"))
                   + f" | {m['compute_slowdown']:.2f} | {m['comm_slowdown']:.2f} | {', '.join(padded)} |")
    return "\n".join(out)


def render_per_rank(docs: list[dict]) -> str:
    """Per strategy, rank by rank (rank 0 / rank 1 ...): overlap, exposed communication, compute slowdown, padding."""
    (analysis,) = [d["analysis"] for d in docs]
    cells = (("comp_comm_overlap_pct", "{:.2f}"), ("exposed_comm_us", "{:.2f}", 1000), ("compute_slowdown", "{:.2f}"),
             ("padded_launches", "{}"))
    out = ["| strategy | overlap % | exposed comm ms | compute x | padded launches |", "| --- |" + " --- |" * 4]
    for s in _strategies(analysis):
        ranks = _ranks(analysis, s)
        out.append(f"| {s} | " + " | ".join(" / ".join(fmt.format(r[k] / scale[0] if scale else r[k]) for r in ranks)
                                            for k, fmt, *scale in cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    docs = [json.load(open(sys.argv[1]))]
    print(render_means(docs), "", render_per_rank(docs), sep="\n")
