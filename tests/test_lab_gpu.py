"""The lab on a GPU (run on the device); skipped without CUDA."""
import pytest

from ccoverlap import cuda_driver as cu

pytestmark = pytest.mark.gpu


def test_nccl_proxy_footprint_matches_the_installed_nccl():
    pytest.importorskip("torch")
    from ccoverlap import kernels
    from ccoverlap.nccl import nccl_footprint

    from ccoverlap.limits import get_device

    arch = get_device("cuda").arch
    target = nccl_footprint(arch).footprint
    proxy = kernels.build_comm_proxy(arch, target.regs, target.static_smem)
    drv = cu.driver()
    assert abs(drv.kernel_attribute(cu.FUNC_NUM_REGS, proxy.handle, 0) - target.regs) <= 8
    assert drv.kernel_attribute(cu.FUNC_SHARED_SIZE_BYTES, proxy.handle, 0) == target.static_smem
    assert drv.kernel_attribute(kernels.FUNC_LOCAL_SIZE_BYTES, proxy.handle, 0) == 0  # no spills


def test_every_strategy_runs_and_keeps_results():
    pytest.importorskip("torch")
    from ccoverlap.lab.config import LabConfig
    from ccoverlap.lab.runner import run
    from ccoverlap.limits import get_device

    cfg = LabConfig(computes=("fma",), comms=("nccl",), orders=("with", "delayed"), reps=10, warmup=1,
                    fma_iters=2000, comm_mib=64, delay_ms=0.05)
    rows, timelines = run(cfg, get_device("cuda"))
    by = {(r["strategy"], r["order"]): r for r in rows}
    assert {s for s, _ in by} >= {"sequential", "naive", "priority", "shape", "priority+shape", "carveout",
                                 "green", "shrink+shape+priority", "compute-alone", "comm-alone"}
    assert by[("carveout", "with")]["status"].startswith("n/a")
    for r in rows:
        if r["status"] == "ok" and "outputs_match" in r:
            assert r["outputs_match"] and r["comm_wrong"] == 0, r["strategy"]
    assert by[("priority+shape", "with")]["pad_bytes"] > 0
    assert timelines[("fma", "nccl", "priority", "with")]["comm"]
