"""The launch interposer on a real GPU (bench/device/interposer_gpu.sh); skipped without CUDA."""
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

DEVICE = Path(__file__).parent.parent / "bench" / "device"
_spec = importlib.util.spec_from_file_location("interposer_gpu", DEVICE / "interposer_gpu.py")
gpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc")
    exe = tmp_path_factory.mktemp("bench") / "launch_bench"
    subprocess.run([nvcc, "-O2", "-arch=native", "-o", exe, DEVICE / "launch_bench.cu"], check=True, timeout=300)
    return str(exe)


@pytest.mark.parametrize("pad", [4096, 65536])  # 65536: above 48 KiB, the attribute of a CUkernel is raised
def test_the_device_receives_exactly_the_pad(bench, tmp_path, pad):
    assert gpu.probe(bench, 1024, None, tmp_path) == {"requested": 1024, "seen": 1024}
    assert gpu.probe(bench, 1024, pad, tmp_path) == {"requested": 1024, "seen": 1024 + pad}


def test_padded_torch_results_are_bitwise_identical(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    gpu.run_workload(tmp_path / "base.pt")
    gpu.run_workload(tmp_path / "pad.pt", gpu.POLICIES["pad_64k"], tmp_path / "stats.json")
    assert all(gpu.identical(tmp_path / "base.pt", tmp_path / "pad.pt").values())
    stats = gpu.stats_summary(tmp_path / "stats.json")
    assert stats["padded"] > 0 and "launch_retried" not in stats["skipped"]
