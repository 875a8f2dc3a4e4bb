"""The lab on a GPU (run on the device); skipped without CUDA."""
import pytest

from ccoverlap.gpu import cuda_driver as cu

pytestmark = pytest.mark.gpu


def test_nccl_proxy_footprint_matches_the_installed_nccl():
    pytest.importorskip("torch")
    from ccoverlap.lab import kernels
    from ccoverlap.model.nccl import nccl_footprint

    from ccoverlap.model.limits import get_device

    arch = get_device("cuda").arch
    target = nccl_footprint(arch).footprint
    proxy = kernels.build_comm_proxy(arch, target.regs, target.static_smem)
    drv = cu.driver()
    assert abs(drv.kernel_attribute(cu.FUNC_NUM_REGS, proxy.handle, 0) - target.regs) <= 8
    assert drv.kernel_attribute(cu.FUNC_SHARED_SIZE_BYTES, proxy.handle, 0) == target.static_smem
    assert drv.kernel_attribute(kernels.FUNC_LOCAL_SIZE_BYTES, proxy.handle, 0) == 0  # no spills


def test_every_strategy_runs_and_keeps_results():
    pytest.importorskip("torch")
    from ccoverlap.control import levers
    from ccoverlap.lab.config import LabConfig
    from ccoverlap.lab.runner import run
    from ccoverlap.model.limits import get_device

    cfg = LabConfig(computes=("fma",), comms=("nccl",), orders=("with", "delayed"), reps=10, warmup=1,
                    fma_iters=2000, comm_mib=64, delay_ms=0.05)
    rows, timelines = run(cfg, get_device("cuda"))
    by = {(r["strategy"], r["order"]): r for r in rows}
    assert {s for s, _ in by} >= {s.name for s in levers.STRATEGIES} | {"compute-alone", "comm-alone"}
    assert by[("sm-carveout+priority", "with")]["status"].startswith("n/a")  # fma is no cuBLAS kernel
    assert by[("max-connections", "with")]["status"].startswith("n/a")
    for r in rows:
        if r["status"] == "ok" and "outputs_match" in r:
            assert r["outputs_match"] and r["comm_wrong"] == 0, r["strategy"]
    assert by[("priority+shape", "with")]["pad_bytes"] > 0
    assert by[("nccl-threads+shape+priority", "with")]["comm_threads"] == 288
    assert by[("nccl-cluster", "with")]["comm_cluster"] == 1
    assert timelines[("fma", "nccl", "priority", "with")]["comm"]


def test_paced_proxy_keeps_its_pace_and_data():
    """--comm-busbw: the comm_paced proxy moves its bytes no faster than the pace, and copies them right."""
    pytest.importorskip("torch")
    from ccoverlap.lab.config import LabConfig
    from ccoverlap.lab.runner import run
    from ccoverlap.model.limits import get_device

    cfg = LabConfig(computes=("sparse",), comms=("nccl-allreduce",), orders=("with",), reps=10, warmup=1,
                    comm_mib=256, comm_busbw=100.0, sparse_ms=1.0, strategies=("no-overlap", "carveout-hint"))
    rows, _ = run(cfg, get_device("cuda"))
    alone = next(r for r in rows if r["strategy"] == "comm-alone")
    assert alone["comm_done_ms"] >= 256 * 2**20 / 100e9 * 1e3 * 0.95  # 2.68 ms at 100 GB/s
    hinted = next(r for r in rows if r["strategy"] == "carveout-hint")
    assert hinted["status"] == "ok" and hinted["comm_wrong"] == 0 and hinted["carveout_hint"] == 100
