"""The bench on GPUs with NCCL (run on the device); skipped without CUDA."""
import json

import pytest

from ccoverlap import cuda_driver
from ccoverlap.cli import main

pytestmark = pytest.mark.gpu


def test_ddp_and_micro_with_nccl_on_every_visible_gpu(tmp_path):
    gpus = cuda_driver.driver().device_count()
    out = tmp_path / "r.json"
    code = main(["bench", "--workload", "micro,ddp", "--device", "cuda", "--nproc", str(gpus), "--tiny",
                 "--steps", "5", "--strategies", "default,priority,shape", "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == 0 and data["provenance"]["backend"] == "nccl"
    assert all(r["status"] == "ok" for r in data["rows"]) and all(m["match"] for m in data["outputs_match"].values())
