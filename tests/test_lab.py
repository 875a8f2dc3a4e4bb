import json
from pathlib import Path

import pytest

from ccoverlap import KernelFootprint, UsageError
from ccoverlap.control import levers
from ccoverlap.gpu import cuda_driver as cu
from ccoverlap.cli import main
from ccoverlap.lab import metrics, plots, workloads
from ccoverlap.lab.config import CASES, LabConfig, cells
from ccoverlap.control.shaping import shaped_dynamic_smem

#: what the lab run of 2026-11-30 (bench/results/lab-2026-11-30-h200.json) measured, under that day's names
RECORDED_STRATEGIES = ["sequential", "naive", "priority", "shape", "priority+shape", "carveout", "green",
                       "shrink+shape+priority"]
RECORDED_FAMILIES = ("fma", "elementwise", "gemm", "attention", "transformer")


def test_the_lab_runs_the_registry_strategies_by_default():
    assert LabConfig().strategies == tuple(s.name for s in levers.STRATEGIES)
    assert LabConfig().strategies[:2] == ("no-overlap", "default")


class _Phase:
    def __init__(self, footprint=None, uses_cublas=False, kernels=()):
        self.footprint, self.uses_cublas, self.kernels = footprint, uses_cublas, kernels


class _Proxy:
    shape = workloads.CommShape(640, 16, 4)
    protocol = "SIMPLE"

    def footprint(self, shape=None):
        s = shape or self.shape
        return KernelFootprint(s.threads, 96, 22592, 82240, grid=s.ctas, cluster=s.cluster)


def _lab(host=levers.Host("cuda", (2, 28, 9), (9, 0), True, True, True)):
    from ccoverlap.lab.runner import Lab
    from ccoverlap.model.limits import get_device

    lab = object.__new__(Lab)  # no GPU: only the lever arithmetic runs
    lab.cfg, lab.device, lab.host = LabConfig(), get_device("h200"), host
    return lab


FMA = KernelFootprint(256, 16, grid=132 * 8 * 6)


@pytest.mark.parametrize("name, expect", [
    ("default", dict(concurrent=True, priority=False, comm=workloads.CommShape(640, 16, 4), pad=0)),
    ("no-overlap", dict(concurrent=False, priority=False)),
    ("priority", dict(priority=True)),
    ("nccl-threads+priority", dict(priority=True, comm=workloads.CommShape(288, 16, 4))),  # Simple: + a sync warp
    ("nccl-ctas=8+nccl-cluster=1", dict(comm=workloads.CommShape(640, 8, 1))),
    ("nccl-cluster=0", dict(comm=workloads.CommShape(640, 16, 1))),
    ("green", dict(green_sms=16)),
    ("green=24+priority", dict(green_sms=24, priority=True)),
    ("carveout-hint=60", dict(hint=60)),
    ("comm-carveout-hint", dict(comm_hint=100, hint=None)),
    ("carveout-hint=60+comm-carveout-hint=80", dict(hint=60, comm_hint=80)),
])
def test_each_lever_has_its_lab_mechanism(name, expect):
    from ccoverlap.lab.runner import Setup

    info = {}
    setup = _lab()._setup(_Phase(FMA, kernels=("fma",)), _Proxy(), levers.strategy(name), info)
    assert isinstance(setup, Setup), setup
    for key, value in expect.items():
        assert getattr(setup, key) == value, key
    assert info["comm_threads"] == setup.comm.threads and info["comm_priority"] == setup.priority


def test_shape_pads_against_the_levers_comm_shape():
    info = {}
    setup = _lab()._setup(_Phase(KernelFootprint(256, 16, grid=132 * 8 * 6), kernels=("fma",)), _Proxy(),
                          levers.strategy("nccl-threads+shape+priority"), info)
    assert setup.pad > 0 and info["pad_bytes"] == setup.pad and setup.comm.threads == 288


@pytest.mark.parametrize("name, phase, reason", [
    ("sm-carveout+priority", _Phase(FMA, uses_cublas=False, kernels=("fma",)), "n/a: SM carveout applies to cuBLAS"),
    ("carveout-hint", _Phase(None, uses_cublas=True), "n/a: library kernels get the hint through the interposer"),
    ("shape", _Phase(None, uses_cublas=True), "n/a: library kernels are shaped by the launch interposer"),
    ("max-connections", _Phase(FMA), "n/a: max-connections: needs a fresh process"),
    ("nccl-cta-policy", _Phase(FMA), "n/a: nccl-cta-policy: the lab's proxy has no copy-engine path"),
    ("shape", _Phase(KernelFootprint(256, 32, grid=132)), "infeasible: registers bind"),
])
def test_levers_the_lab_cannot_apply_say_why(name, phase, reason):
    assert _lab()._setup(phase, _Proxy(), levers.strategy(name), {}).startswith(reason)


def test_on_a_cpu_host_every_gpu_lever_is_na():
    reason = _lab(levers.Host("cpu"))._setup(_Phase(FMA), _Proxy(), levers.strategy("priority"), {})
    assert reason == "n/a: priority: needs CUDA or ROCm"


def test_lever_cases_are_valid_configs():
    for name, preset in CASES.items():
        cfg = LabConfig(**{**vars(LabConfig()), **preset}).validate()
        assert cfg.orders == ("with",) and len(cfg.computes) == 1, name
    assert "green+nccl-cluster" in CASES["green-cluster"]["strategies"]
    assert CASES["persistent-gemm"]["comm_busbw"] > 0


def test_efficiency_and_reduction():
    assert metrics.reduction(10.0, 8.0) == pytest.approx(0.2)
    assert metrics.efficiency(10.0, 8.0, 6.0) == pytest.approx(0.5)
    assert metrics.efficiency(10.0, 11.0, 6.0) == pytest.approx(-0.25)
    assert metrics.efficiency(6.0, 6.0, 6.0) is None


def test_case_rows_from_fake_timings():
    case = {"compute": "fma", "comm": "nccl", "compute_alone_ms": 6.0, "comm_alone_ms": 2.0, "sequential_ms": 8.0}
    measured = {
        ("priority", "with"): {"info": {"pad_bytes": 0}, "samples": {
            "total_ms": [6.5, 6.4, 6.6, 7.0] + [6.5] * 7, "comm_done_ms": [3.0] * 11, "compute_ms": [6.3] * 11}},
        ("shape", "with"): {"info": {}, "status": "infeasible: registers bind"},
    }
    ok, infeasible = metrics.case_rows(case, measured)
    assert ok["total_ms"] == 6.5 and ok["total_ms_min"] == 6.4 and ok["total_ms_max"] == 7.0
    assert ok["efficiency"] == pytest.approx((8.0 - 6.5) / (8.0 - 6.0))
    assert ok["comm_slowdown"] == pytest.approx(1.5) and ok["compute_slowdown"] == pytest.approx(1.05)
    assert ok["status"] == "ok" and len(ok["samples"]["total_ms"]) == 11
    assert infeasible == {"compute": "fma", "comm": "nccl", "strategy": "shape", "order": "with",
                          "status": "infeasible: registers bind"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(computes=("fma", "bogus")), "--compute fma,bogus: valid fma, elementwise"),
        (dict(comms=()), "--comm (empty)"),
        (dict(orders=("after",)), "--orders after: valid before, with, delayed"),
        (dict(reps=5), "--reps=5 is out of range: valid 10..10000"),
        (dict(delay_ms=-1.0), "--delay-ms=-1.0 is out of range"),
    ],
)
def test_config_validation(kwargs, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LabConfig(**kwargs).validate()


def test_cells_counts_orders_for_concurrent_strategies_only():
    cfg = LabConfig(computes=("fma", "gemm"), comms=("nccl",), orders=("before", "with", "delayed"))
    assert cells(cfg) == 2 * (1 + (len(levers.STRATEGIES) - 1) * 3)


def _fake_rows():
    rows = []
    for strategy, total in (("no-overlap", 8.0), ("default", 8.1), ("priority", 6.4), ("priority+shape", 6.3)):
        rows.append({"compute": "fma", "comm": "nccl", "strategy": strategy, "order": "with", "status": "ok",
                     "total_ms": total, "total_ms_min": total - 0.1, "total_ms_max": total + 0.1,
                     "comm_done_ms": 2.5, "compute_alone_ms": 6.0, "comm_alone_ms": 2.0, "sequential_ms": 8.0})
    return rows


def test_plots_write_pngs(tmp_path):
    bars = plots.bars(_fake_rows(), tmp_path / "bars.png")
    timelines = {("fma", "nccl", s, "with"): {"compute": [[0.0, 1.0, 0], [0.5, 2.0, 1]], "comm": [[0.2, 0.9, 2]]}
                 for s in ("default", "priority")}
    tl = plots.timeline(timelines, ("fma", "nccl"), ["default", "priority", "green"], tmp_path / "tl.png")
    for png in (bars, tl):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_cli_rejects_bad_input_before_touching_a_gpu(capsys):
    assert main(["lab", "--compute", "fma,nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "valid fma, elementwise, gemm, attention, transformer" in err


def test_cli_without_gpu_says_so(capsys, monkeypatch):
    monkeypatch.setattr(cu, "driver", lambda: None)
    assert main(["lab", "--quick"]) == 2
    assert "the lab needs a CUDA GPU" in capsys.readouterr().err


class FakeDriver:
    def __init__(self):
        self.set = []

    def function_attribute(self, attr, handle):
        return {cu.FUNC_NUM_REGS: 16, cu.FUNC_SHARED_SIZE_BYTES: 0, cu.FUNC_REQUIRED_CLUSTER_WIDTH: 0}[attr]

    def set_function_attribute(self, attr, handle, value):
        self.set.append((attr, handle, value))


def test_shaping_api_pads_and_raises_the_limit():
    drv = FakeDriver()
    nccl = KernelFootprint(640, 96, 22592, 82240, grid=16, cluster=4)
    smem, p = shaped_dynamic_smem(0x1234, threads=256, dynamic_smem=100, comm=nccl, device="h200", drv=drv)
    assert p.feasible and smem == 100 + p.pad_bytes and p.compute_blocks_after == 1
    assert drv.set == [(cu.FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0x1234, smem)]


def test_shaping_api_leaves_launch_alone_when_infeasible():
    drv = FakeDriver()
    smem, p = shaped_dynamic_smem(1, threads=1024, comm=KernelFootprint(1024, 64), device="h200", drv=drv)
    assert not p.feasible and smem == 0 and drv.set == []


RESULTS = sorted((Path(__file__).parents[1] / "bench" / "results").glob("lab-*-h200.json"))


def test_recorded_lab_run_covers_every_family_and_strategy():
    assert RESULTS, "run bench/device/lab.sh on an H200 and commit its JSON"
    data = json.loads(RESULTS[-1].read_text())
    prov = data["provenance"]
    assert "H200" in prov["gpu"] and prov["commit"] and prov["torch"] and prov["driver"]
    seen = {(r["compute"], r["strategy"]) for r in data["rows"]}
    for family in RECORDED_FAMILIES:
        for strategy in RECORDED_STRATEGIES + ["compute-alone", "comm-alone"]:
            assert (family, strategy) in seen, (family, strategy)
    for r in data["rows"]:
        if r["status"] == "ok":
            assert len(r["samples"]["total_ms"]) >= 10 and r["total_ms_min"] <= r["total_ms"] <= r["total_ms_max"]
            if r["strategy"] not in ("compute-alone", "comm-alone"):
                assert r["outputs_match"] and r["comm_wrong"] == 0


def test_library_families_rerun_the_lab_with_the_interposer_preloaded(monkeypatch, capsys):
    """Shaping gemm/attention/transformer needs the interposer: the lab re-executes itself under it
    (mode off; the proxy is communication by the one table, model/comm.py), once."""
    import os

    from ccoverlap.gpu import cuda_driver
    from ccoverlap.cli import main
    from ccoverlap.control.interposer import Policy, library_path
    from ccoverlap.lab.config import LabConfig, needs_interposer

    assert needs_interposer(LabConfig(computes=("fma", "gemm"), strategies=("default", "shape")))
    assert not needs_interposer(LabConfig(computes=("gemm",), strategies=("default", "priority")))
    assert not needs_interposer(LabConfig(computes=("fma",), strategies=("shape",)))

    class Exec(Exception):
        pass

    seen = {}

    def fake_execve(path, argv, env):
        seen.update(argv=argv, env=env)
        raise Exec

    monkeypatch.setattr(cuda_driver, "driver", lambda: object())
    monkeypatch.setattr(os, "execve", fake_execve)
    monkeypatch.delenv("CCOVERLAP_LAB_CHILD", raising=False)
    monkeypatch.setenv("LD_PRELOAD", "/opt/user-allocator.so")
    with pytest.raises(Exec):
        main(["lab", "--quick", "--compute", "gemm"])
    assert seen["argv"][1:] == ["-m", "ccoverlap", "lab", "--quick", "--compute", "gemm"]
    env = seen["env"]
    assert env["LD_PRELOAD"].split() == [library_path(), "/opt/user-allocator.so"]  # the user's preload is kept
    assert env["CCOVERLAP_LAB_CHILD"] == "1"
    assert Policy.from_environ(env) == Policy(mode="off", gate="always")  # the proxy: communication to every tool
    from ccoverlap.model.comm import CommKernels

    assert CommKernels()("comm_proxy") and CommKernels()("comm_paced")
