"""Holistic Trace Analysis's numbers for the fixture traces: computed live, or recorded.

`python tests/hta_reference.py` (in an environment with `pip install
holistictraceanalysis`) re-records tests/data/traces/hta_reference.json for
every trace folder; test_analysis_hta.py compares ccoverlap with the recorded
numbers always, and with a live HTA run where HTA imports.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

TRACES = Path(__file__).parent / "data" / "traces"
RECORDED = TRACES / "hta_reference.json"
NOT_CROSS_CHECKED = {"bad"}  # folders of deliberately broken files


def trace_folders() -> list[Path]:
    """Every folder under tests/data/traces that holds traces (the real H200 ones included)."""
    return sorted(
        d for d in TRACES.rglob("*")
        if d.is_dir() and not NOT_CROSS_CHECKED & set(d.relative_to(TRACES).parts)
        and any(f.name.endswith((".json", ".json.gz")) for f in d.iterdir())
    )


def hta_numbers(folder: Path) -> dict[str, dict[str, float]]:
    """Per rank: HTA's comp_comm_overlap_pct and temporal breakdown (us), with exact (ns) timestamps."""
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"  # HTA otherwise rounds float timestamps to whole us
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=str(folder))
    overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
    temporal = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    return {
        str(rank): {
            "comp_comm_overlap_pct": float(overlap.loc[rank, "comp_comm_overlap_pctg"]),  # HTA rounds to 0.01
            "idle_us": float(temporal.loc[rank, "idle_time(us)"]),
            "compute_us": float(temporal.loc[rank, "compute_time(us)"]),
            "span_us": float(temporal.loc[rank, "kernel_time(us)"]),
        }
        for rank in overlap.index
    }


def record() -> None:
    from importlib.metadata import version

    out = {
        "hta_version": version("HolisticTraceAnalysis"),
        "pandas_version": version("pandas"),  # HTA 0.5.0 fails on small traces with pandas 3
        "settings": "HTA_DISABLE_NS_ROUNDING=1; TraceAnalysis(trace_dir).get_comm_comp_overlap() and "
                    "get_temporal_breakdown()",
        "folders": {str(f.relative_to(TRACES)): hta_numbers(f) for f in trace_folders()},
    }
    RECORDED.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(out['folders'])} folders with HTA {out['hta_version']} in {RECORDED}", file=sys.stderr)


if __name__ == "__main__":
    record()
