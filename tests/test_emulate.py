"""`--comm emulate` on the CPU: ring arithmetic, proxy pacing, data semantics, and every workload
through the emulated process group (the proxy kernel itself is GPU-only: tests/test_bench_gpu.py)."""
import json

import pytest

from ccoverlap import cuda_driver
from ccoverlap.cli import main

torch = pytest.importorskip("torch")
from ccoverlap.bench import emulate  # noqa: E402
from ccoverlap.bench.proxy import WORD, Launch  # noqa: E402

MiB = 2**20


def test_ring_bytes_follow_nccl_tests_bus_factors():
    assert emulate.ring_bytes("allreduce", 64 * MiB, 8) == 64 * MiB * 2 * 7 // 8
    assert emulate.ring_bytes("allgather", 64 * MiB, 8) == 64 * MiB * 7 // 8
    assert emulate.ring_bytes("reduce_scatter", 64 * MiB, 4) == 64 * MiB * 3 // 4
    assert emulate.ring_bytes("alltoall", 64 * MiB, 2) == 32 * MiB
    assert emulate.ring_bytes("broadcast", 1000, 8) == 1000


def test_strategy_variables_reach_the_proxies_as_they_reach_nccl():
    plain = emulate.Emulation.from_env(8, 280.0, env={})
    assert (plain.ctas, plain.threads, plain.high_priority) == (16, 640, False)
    shrunk = emulate.Emulation.from_env(8, 280.0, env={"NCCL_MAX_CTAS": "4", "NCCL_NTHREADS": "256",
                                                       "TORCH_NCCL_HIGH_PRIORITY": "1"})
    assert (shrunk.ctas, shrunk.threads, shrunk.high_priority) == (4, 256, True)
    assert plain.duration_ns(280_000) == 1000  # 280 kB at 280 GB/s: 1 us


def test_a_proxy_launch_is_paced_to_the_bus_bandwidth():
    e = emulate.Emulation(world=8, busbw_gbps=280.0, ctas=16, threads=640)
    ring = emulate.ring_bytes("allreduce", 64 * MiB, 8)
    launch = Launch.plan(e, unroll=4, ring=ring, dst_bytes=64 * MiB)
    assert launch.ctas == 16 and launch.total == ring // WORD
    steps = -(-(-(-launch.total // 16)) // (640 * 4))
    assert launch.step_ns * steps == pytest.approx(ring / 280.0, rel=1e-3)  # ~419 us for 112 MiB
    # a small collective uses the CTAs it can fill, and an all-gather writes its whole output
    small = Launch.plan(e, unroll=4, ring=1024, dst_bytes=4096)
    assert small.ctas == 1 and small.total == 4096 // WORD


@pytest.mark.parametrize(("src", "dst", "expected"), [
    ([1, 2], [0, 0, 0, 0, 0, 0], [1, 2, 1, 2, 1, 2]),  # all-gather: this rank's shard everywhere
    ([1, 2, 3, 4, 5, 6], [0, 0], [1, 2]),  # reduce-scatter: this rank's chunk, others add zeros
])
def test_emulated_data_semantics(src, dst, expected):
    s, d = torch.tensor(src, dtype=torch.float32), torch.tensor(dst, dtype=torch.float32)
    emulate.tile(s, d)
    assert d.tolist() == expected


def test_every_workload_runs_through_the_emulated_group(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    out = tmp_path / "e.json"
    code = main(["bench", "--comm", "emulate", "--device", "cpu", "--emulate-world", "4", "--steps", "2", "--tiny",
                 "--strategies", "no-overlap,default,shape", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "EMULATION" in printed
    data = json.loads(out.read_text())
    assert data["provenance"]["backend"] == "ccov_emulate" and data["provenance"]["world_size"] == 1
    assert all(m["match"] for m in data["outputs_match"].values()) and set(data["outputs_match"]) == {
        "micro", "ddp", "fsdp", "tp", "moe"}
    ok = [r for r in data["rows"] if r["status"] == "ok"]
    assert {r["strategy"] for r in ok} == {"no-overlap", "default"}
    calls = ok[0]["emulation"]["calls"]  # one process ran every workload: the union of their collectives
    assert ok[0]["emulation"]["world"] == 4 and ok[0]["emulation"]["emulated"]
    for kind in ("allreduce", "allgather", "reduce_scatter", "alltoall"):
        assert calls.get(kind, 0) > 0, calls
    assert all(r["wrong"] == 0 for r in ok if r["workload"] == "micro")


@pytest.mark.parametrize(("argv", "message"), [
    (["--comm", "emulate", "--nproc", "2"], "--comm emulate runs one process: --nproc 2 (valid 1)"),
    (["--comm", "emulate", "--emulate-world", "1"], "--emulate-world=1 is out of range"),
    (["--comm", "emulate", "--busbw", "0"], "--busbw=0"),
    (["--comm", "nccl"], "--comm nccl needs GPUs"),
    (["--comm", "mpi"], "--comm mpi: valid nccl (GPUs), gloo (CPU) or emulate"),
    (["--comm", "emulate", "--device", "cuda"], "--comm emulate on --device cuda needs a GPU; 0 visible"),
])
def test_bad_emulation_input_is_one_line_exit_2(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
