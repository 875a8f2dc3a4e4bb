"""`ccoverlap tune` on one GPU, end to end: step times by CUDA events, the doctor's profiled run, and a program
with no communication ends quickly with "default kept" (nothing to overlap: every lever pruned)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

TRAIN = Path(__file__).parent / "data" / "doctor_train.py"


@pytest.mark.gpu
def test_tune_without_communication_keeps_the_default_quickly(tmp_path):
    pytest.importorskip("torch")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ccoverlap", "tune", "--budget", "3", "--steps", "10", "--skip", "5",
                           "--out", str(tmp_path / "t"), "--", sys.executable, str(TRAIN), "--cuda", "--steps", "1000"],
                          capture_output=True, text=True, timeout=400, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert doc["decision"] == "default kept" and "no communication" in doc["reason"]
    phases = [t["phase"] for t in doc["trials"]]
    assert phases == ["baseline", "baseline", "doctor"]
    assert all(t["clock"] == "cuda events" and len(t["samples_ms"]) == 10 for t in doc["trials"])
    assert doc["doctor"]["comm_seen"] is False
    assert elapsed < 180
    assert "default kept" in proc.stdout
