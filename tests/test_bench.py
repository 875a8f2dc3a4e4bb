import json

import pytest

from ccoverlap import cuda_driver
from ccoverlap.bench import launcher
from ccoverlap.bench.config import TINY, BenchConfig
from ccoverlap.bench.strategies import BY_NAME
from ccoverlap.cli import main

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workload", "ddp,gpt4"], "--workload gpt4: valid micro, ddp, fsdp, tp, moe"),
        (["--strategies", "default,turbo"], "--strategies turbo: valid no-overlap, default"),
        (["--workload", "tp", "--nproc", "3", "--device", "cpu"], "tp: world size 3 must divide --heads 4"),
        (["--device", "cuda", "--nproc", "2"], "--device cuda with --nproc 2 needs 2 GPUs; 0 visible"),
        (["--device", "tpu"], "--device tpu: valid cpu (gloo) or cuda (nccl)"),
        (["--d-model", "65"], "--d-model 65 is not divisible by --heads 4"),
        (["--micro-sizes", "1k"], "--micro-sizes 1k: whole numbers of bytes"),
        (["--steps", "0"], "--steps=0 is out of range"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_strategy_environments():
    assert launcher.strategy_env(BY_NAME["default"], "/tmp") == {
        "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    assert launcher.strategy_env(BY_NAME["priority"], "/tmp")["TORCH_NCCL_HIGH_PRIORITY"] == "1"
    shaped = launcher.strategy_env(BY_NAME["priority+shape"], "/tmp/s")
    assert shaped["LD_PRELOAD"].endswith(".so") and shaped["CCOVERLAP_MODE"] == "auto"
    assert shaped["CCOVERLAP_STATS"] == "/tmp/s/interposer-%p.json" and shaped["TORCH_NCCL_HIGH_PRIORITY"] == "1"
    assert launcher.strategy_env(BY_NAME["max-connections-1"], "/tmp")["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_summary_takes_the_slowest_rank_per_step_and_compares_losses():
    ranks = [{"rank": 0, "step_ms": [10.0, 12.0, 11.0], "compute_only_ms": [7.0, 7.0, 8.0], "losses": [2.0, 1.5], "note": "",
              "wall_s": 2.0},
             {"rank": 1, "step_ms": [11.0, 10.0, 13.0], "compute_only_ms": [8.0, 6.0, 7.0], "losses": [2.0, 1.5], "note": "",
              "wall_s": 2.5}]
    (row,) = launcher.summarize("ddp", "default", ranks, {})
    assert row["step_ms"] == 12.0 and row["step_ms_min"] == 11.0 and row["step_ms_max"] == 13.0 and row["wall_s"] == 2.5
    assert row["compute_only_ms"] == 8.0 and row["exposed_comm_ms"] == 4.0
    other = dict(row, strategy="priority", losses=[2.0, 1.5000001])
    verdict = launcher.compare([row, other])["ddp"]
    assert verdict["match"] and verdict["how"].startswith("max relative loss difference")
    assert not launcher.compare([row, dict(row, strategy="x", losses=[2.0, 1.6])])["ddp"]["match"]
    failed = {"workload": "tp", "strategy": "default", "status": "failed: boom"}
    assert launcher.compare([failed])["tp"] == {"match": False, "how": "no strategy ran"}


def test_cuda_only_strategies_are_listed_not_dropped():
    cfg = BenchConfig(workloads=("ddp",), strategies=("priority", "shape"), size=TINY).resolved(gpus=0).validate()
    rows = launcher.run(cfg)
    assert [(r["strategy"], r["status"]) for r in rows] == [("priority", "n/a: needs CUDA and NCCL"),
                                                           ("shape", "n/a: needs CUDA and NCCL")]


@pytest.mark.parametrize("workload", ["micro", "ddp", "fsdp", "tp", "moe"])
def test_every_workload_runs_on_cpu_with_gloo(workload, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    out = tmp_path / "r.json"
    code = main(["bench", "--workload", workload, "--device", "cpu", "--nproc", "2", "--steps", "3", "--tiny",
                 "--strategies", "no-overlap,default,priority", "--json", str(out)])
    assert code == 0, capsys.readouterr()
    data = json.loads(out.read_text())
    assert data["complete"] and data["provenance"]["backend"] == "gloo" and data["provenance"]["world_size"] == 2
    assert data["outputs_match"][workload]["match"]
    rows = data["rows"]
    assert {r["strategy"] for r in rows} == {"no-overlap", "default", "priority"}
    assert [r["status"] for r in rows if r["strategy"] == "priority"][0] == "n/a: needs CUDA and NCCL"
    ok = [r for r in rows if r["status"] == "ok"]
    if workload == "micro":
        assert all(r["wrong"] == 0 and r["busbw_GBps"] == pytest.approx(r["algbw_GBps"]) for r in ok)  # 2(n-1)/n = 1
    else:
        assert all(len(r["samples"]["rank0"]) == 3 and r["step_ms"] > 0 for r in ok)
        assert all((r["exposed_comm_ms"] is not None) == (workload == "ddp") for r in ok)
    assert out.with_suffix(".png").stat().st_size > 5000


def test_traces_land_where_analyze_reads_a_workload(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    traces = tmp_path / "traces"
    assert main(["bench", "--workload", "ddp", "--device", "cpu", "--nproc", "2", "--steps", "2", "--tiny",
                 "--strategies", "default", "--trace", str(traces)]) == 0
    assert sorted(p.relative_to(traces).as_posix() for p in traces.rglob("*.json.gz")) == [
        "ddp/default/rank0_trace.json.gz", "ddp/default/rank1_trace.json.gz"]
    capsys.readouterr()
    # CPU traces hold no GPU kernels: analyze names each file on one line and exits 2
    assert main(["analyze", str(traces / "ddp")]) == 2
    err = capsys.readouterr().err
    assert "rank0_trace.json.gz" in err and "Traceback" not in err


def test_a_failing_rank_stops_the_others_at_once():
    import subprocess
    import sys
    import time

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    failer = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    t0 = time.monotonic()
    assert launcher.wait_all([sleeper, failer], timeout_s=30) == (1, 3)
    assert time.monotonic() - t0 < 10 and sleeper.returncode is not None


def test_ranks_that_outlive_the_timeout_are_killed():
    import subprocess
    import sys

    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert launcher.wait_all([slow], timeout_s=0.5) == (0, "timeout") and slow.returncode is not None


def test_results_are_written_after_every_strategy(tmp_path, monkeypatch):
    from ccoverlap.cli import bench as cli_bench

    seen = []
    real_write = cli_bench._write

    def spy(out, cfg, prov, rows, complete, match=None):
        real_write(out, cfg, prov, rows, complete, match)
        seen.append((complete, len(json.loads(out.read_text())["rows"])))

    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    monkeypatch.setattr(cli_bench, "_write", spy)
    assert main(["bench", "--workload", "ddp", "--device", "cpu", "--nproc", "2", "--steps", "1", "--tiny",
                 "--strategies", "no-overlap,default,priority", "--json", str(tmp_path / "r.json")]) == 0
    assert seen == [(False, 1), (False, 2), (False, 3), (True, 3)]


def test_missing_torchrun_is_one_line_exit_2(monkeypatch, capsys):
    import shutil

    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["bench", "--workload", "ddp", "--device", "cpu", "--strategies", "default", "--launcher", "torchrun"]) == 2
    err = capsys.readouterr().err
    assert "torchrun is not on PATH" in err and err.count("\n") == 1
