"""The foundation's checks on the H200 (bench/results/occupancy-h200-*.json, `ccoverlap occupancy --validate`, and
bench/results/foundation-h200-*.json, bench/device/foundation.sh), for docs/results.md: the occupancy model
against CUDA's own count, the live limits and NCCL's kernels as read, and the test runs' pytest summaries.

usage: python bench/summarize/foundation.py OCCUPANCY.json OCCUPANCY-SECOND.json FOUNDATION.json
"""
from __future__ import annotations

import json
import re
import sys

_SUMMARY = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in [\d.]+s\b", re.M)


def pytest_runs(log: str) -> list[str]:
    """'passed / run passed' per pytest summary line of a log ('3 passed, 71 deselected in 7.41s' -> '3 / 3'):
    run is every outcome but the deselected, which pytest counts apart from the tests it ran."""
    out = []
    for summary in _SUMMARY.findall(log):
        counts = {what: int(n) for n, what in (part.split() for part in summary.rstrip(", ").split(", "))}
        ran = sum(n for what, n in counts.items() if what != "deselected")
        out.append(f"{counts.get('passed', 0)} / {ran}")
    return out


def _validated(doc: dict) -> tuple[int, int, list[int], str]:
    """(kernels, shapes per kernel, their registers, 'equal / rows equal') of one `occupancy --validate` file."""
    rows = [dict(zip(doc["columns"], r)) for r in doc["rows"]]
    kernels = len({r["kernel"] for r in rows})
    return (kernels, len(rows) // kernels, [r["regs"] for r in rows],
            f"{doc['rows_total'] - doc['rows_mismatched']:,} / {doc['rows_total']:,} equal")


def render_checks(docs: list[dict]) -> str:
    """One row per check: the first validation, the second (its register range and commit), the live limits, NCCL's
    kernels as cuobjdump read them, and the GPU tests then the whole suite."""
    first, second, found = docs
    (kernels1, shapes1, _, equal1), (kernels2, shapes2, regs, equal2) = _validated(first), _validated(second)
    lim, nccl = found["device_limits_live"], found["nccl_footprint"]
    name = "`foundation-h200-2026-11-30.json`"
    rows = [
        (f"model vs `cuOccupancyMaxActiveBlocksPerMultiprocessor`, {kernels1} compiled kernels x {shapes1} launch "
         "shapes", equal1, "`occupancy-h200-2026-11-30.json`"),
        (f"the same, {kernels2} kernels x {shapes2} shapes, registers {min(regs)}-{max(regs)}, shapes within each "
         f"kernel's thread limit (commit {second['provenance']['commit'][:7]})", equal2,
         "`occupancy-h200-2026-11-30-seed1130.json`"),
        ("live limits (`ccoverlap info`), read through the CUDA driver",
         f"{lim['sm_count']} SMs; per SM {lim['max_threads_per_sm']:,} threads, {lim['max_blocks_per_sm']} blocks, "
         f"{lim['regs_per_sm']:,} registers, {lim['smem_per_sm']:,} B shared memory", name),
        (f"NCCL {found['provenance']['nccl']} collective kernels, sm_90 (`cuobjdump`)",
         f"{nccl['regs']} registers, {nccl['static_smem']:,} B static shared memory", name),
        ("GPU tests (`pytest -m gpu`) and the whole suite on the H200",
         f"{' and '.join(pytest_runs(found['gpu_tests_log']))} passed", name),
    ]
    return "\n".join(["| what | result | file |", "| --- | --- | --- |",
                      *(f"| {what} | {result} | {file} |" for what, result, file in rows)])


if __name__ == "__main__":
    print(render_checks([json.load(open(p)) for p in sys.argv[1:4]]))
