import random

from ccoverlap.model.limits import PRESETS
from ccoverlap.lab.validate import Row, _launch_shapes, report


def test_launch_shapes_cover_ranges_and_boundaries():
    dev = PRESETS["h200"]
    shapes = _launch_shapes(random.Random(1), dev, static_smem=1000, max_threads=256, count=400)
    threads = [t for t, _ in shapes]
    dyns = [d for _, d in shapes]
    assert all(1 <= t <= 1024 for t in threads) and all(0 <= d <= dev.smem_per_block_optin - 1000 for d in dyns)
    assert sum(t > 256 for t in threads) > 20  # some shapes exceed the kernel's thread limit
    assert sum(t <= 256 for t in threads) > 250
    assert 0 in dyns and dev.smem_per_block_optin - 1000 in dyns
    # allocation-unit edges: static + dynamic + reservation lands one byte around a 128 B boundary
    edges = {(1000 + d + dev.smem_reserved_per_block) % 128 for d in dyns}
    assert {0, 1, 127} <= edges


def test_report_counts_mismatches():
    rows = [Row("k", 32, 0, 128, 0, 16, 16), Row("k", 32, 0, 128, 0, -1, 16)]
    out = report(PRESETS["h200"], rows, {"gpu": "test"})
    assert out["rows_total"] == 2 and out["rows_mismatched"] == 1 and out["rows"][1][5] == -1
