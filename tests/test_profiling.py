"""One recorder for every trace ccoverlap writes (bench, lab, doctor): steps annotated, readable by analyze."""
import gzip
import json

import pytest


def test_record_writes_one_profiler_step_per_active_call(tmp_path):
    torch = pytest.importorskip("torch")
    from ccoverlap.util import profiling

    calls = []
    path = profiling.record(lambda: calls.append(torch.ones(64).sum()), tmp_path / "a" / "rank0_trace.json.gz",
                            cuda=False, warmup=1, active=2)
    assert len(calls) == 3 and path.exists()
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    steps = sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
    assert len(steps) == 2, steps  # the warm-up call is not recorded
