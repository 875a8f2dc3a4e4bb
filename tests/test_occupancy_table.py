"""The model against CUDA's own occupancy API: every row recorded on the H200 must match."""
import json
from pathlib import Path

import pytest

from ccoverlap import KernelFootprint, occupancy
from ccoverlap.model.limits import PRESETS

TABLES = sorted((Path(__file__).parents[1] / "bench" / "results").glob("occupancy-h200-*.json"))


def test_a_table_of_at_least_1000_footprints_was_recorded():
    assert TABLES, "run bench/device/foundation.sh on an H200 and commit its occupancy table"
    assert all(json.loads(t.read_text())["rows_total"] >= 1000 for t in TABLES)


@pytest.mark.parametrize("table", TABLES, ids=lambda p: p.name)
def test_every_recorded_footprint_matches_cuda(table):
    data = json.loads(table.read_text())
    assert "H200" in data["provenance"]["gpu"] and data["provenance"]["commit"]
    live, preset = data["device_limits"], PRESETS["h200"]
    for field in ("smem_per_sm", "smem_per_block_optin", "smem_reserved_per_block", "regs_per_sm",
                  "max_threads_per_sm", "max_blocks_per_sm", "sm_count"):
        assert live[field] == getattr(preset, field), field
    cols = data["columns"]
    rows = [dict(zip(cols, r)) for r in data["rows"]]
    regs = {r["regs"] for r in rows}
    assert min(regs) <= 32 and max(regs) >= 240 and len(regs) > 50  # the register range is covered
    assert max(r["dynamic_smem"] for r in rows) == preset.smem_per_block_optin
    mismatched = [
        r for r in rows
        if occupancy(preset, KernelFootprint(r["threads"], r["regs"], r["static_smem"], r["dynamic_smem"])).blocks
        != r["cuda_blocks"]
    ]
    assert not mismatched, mismatched[:5]
