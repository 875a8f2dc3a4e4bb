"""`--comm emulate` on the CPU: ring arithmetic, the launch NCCL makes per collective under its knobs,
proxy pacing, data semantics, and every workload through the emulated process group (the proxy kernel
itself is GPU-only: tests/test_bench_gpu.py)."""
import dataclasses
import json

import pytest

from ccoverlap.gpu import cuda_driver
from ccoverlap.control import levers
from ccoverlap.model import nccl
from ccoverlap.cli import main
from ccoverlap.util.errors import UsageError

torch = pytest.importorskip("torch")
from ccoverlap.bench import emulate, launcher  # noqa: E402
from ccoverlap.bench.config import BenchConfig  # noqa: E402
from ccoverlap.bench.proxy import WORD, Launch  # noqa: E402

MiB = 2**20
BIG = 64 * MiB
H200 = levers.Host("cuda", (2, 28, 9), (9, 0), sm_carveout=True, green_contexts=True, interposer=True)


def test_ring_bytes_follow_nccl_tests_bus_factors():
    assert emulate.ring_bytes("allreduce", 64 * MiB, 8) == 64 * MiB * 2 * 7 // 8
    assert emulate.ring_bytes("allgather", 64 * MiB, 8) == 64 * MiB * 7 // 8
    assert emulate.ring_bytes("reduce_scatter", 64 * MiB, 4) == 64 * MiB * 3 // 4
    assert emulate.ring_bytes("alltoall", 64 * MiB, 2) == 32 * MiB
    assert emulate.ring_bytes("broadcast", 1000, 8) == 1000


def test_strategy_variables_reach_the_proxies_as_they_reach_nccl():
    plain = emulate.Emulation.from_env(8, 280.0, env={})
    assert (plain.knobs, plain.high_priority) == (nccl.Knobs(), False)
    env = launcher.rank_launch(levers.strategy("nccl-ctas+nccl-threads+nccl-cluster=2+priority"), "/tmp").environ({})
    shrunk = emulate.Emulation.from_env(8, 280.0, env=env)
    assert ((shrunk.knobs.max_ctas, shrunk.knobs.nthreads, shrunk.knobs.cluster, shrunk.high_priority)
            == (4, 256, 2, True))
    assert plain.duration_ns(280_000) == 1000  # 280 kB at 280 GB/s: 1 us


@pytest.mark.parametrize(("kind", "nbytes", "launch", "threads", "ctas"), [
    ("allreduce", BIG, "allreduce", 512, 24),  # observed: ring LL
    ("allgather", BIG, "allgather", 544, 24),  # observed: ring Simple, 512 + a sync warp
    ("reduce_scatter", BIG, "allgather", 544, 24),  # assumed as all-gather
    ("broadcast", BIG, "allgather", 544, 24),
    ("alltoall", BIG, "sendrecv", 640, 32),  # send/recv: 640 threads, channels rounded up to a power of two
    ("scatter", 4, "sendrecv", 640, 32),  # point-to-point has no small-message shape
    ("allgather", 16 * 1024 - 1, "allgather-small", 128, 1),  # below 2048 x 8 ranks: ring LL on one channel
    ("allreduce", 100, "allgather-small", 128, 1),
    ("allreduce", 16 * 1024, "allreduce", 512, 24),  # from 2048 x 8 ranks on: the large launch
])
def test_each_collective_takes_the_launch_nccl_makes_for_it(kind, nbytes, launch, threads, ctas):
    shape = emulate.Emulation(world=8).shape(kind, nbytes)
    assert ((shape.launch, shape.threads, shape.ctas, shape.cluster, shape.dynamic_smem)
            == (launch, threads, ctas, 4, 82240))
    assert set(emulate.FOOTPRINTS) == set(nccl.RING_FACTORS)  # every collective that moves bytes has one


def test_the_small_message_threshold_scales_with_the_ranks_as_nccls_ll_threshold():
    assert emulate.Emulation(world=2).shape("allgather", 4095).launch == "allgather-small"  # as seen on 2 x H200
    assert emulate.Emulation(world=2).shape("allgather", 4096).launch == "allgather"
    assert emulate.Emulation(world=64).shape("allgather", 100_000).launch == "allgather-small"


@pytest.mark.parametrize(("env", "allreduce", "allgather", "small", "alltoall", "cluster"), [
    ({}, (512, 24), (544, 24), (128, 1), (640, 32), 4),
    ({"NCCL_NTHREADS": "256"}, (256, 24), (288, 24), (128, 1), (640, 32), 4),  # LL: 256; Simple: 256 + sync warp
    ({"NCCL_NTHREADS": "64"}, (96, 24), (96, 24), (96, 1), (640, 32), 4),  # NCCL's floor of 3 warps
    ({"NCCL_NTHREADS": "384"}, (384, 24), (416, 24), (192, 1), (640, 32), 4),  # halved once, then no multiple of 128
    ({"NCCL_NTHREADS": "100"}, (512, 24), (544, 24), (128, 1), (640, 32), 4),  # no multiple of 32: the maximum
    ({"NCCL_NTHREADS": "1024"}, (512, 24), (544, 24), (128, 1), (640, 32), 4),  # above 512: 512
    ({"NCCL_NTHREADS": "0"}, (512, 24), (544, 24), (128, 1), (640, 32), 4),  # not positive: the default
    ({"NCCL_MAX_CTAS": "4"}, (512, 4), (544, 4), (128, 1), (640, 4), 4),
    ({"NCCL_MAX_CTAS": "6"}, (512, 6), (544, 6), (128, 1), (640, 8), 4),  # p2p: rounded up to a power of two
    ({"NCCL_MAX_CTAS": "0"}, (512, 24), (544, 24), (128, 1), (640, 32), 4),  # too low: ignored
    ({"NCCL_MIN_CTAS": "40"}, (512, 40), (544, 40), (128, 1), (640, 64), 4),  # raises the channels, not a tiny one's
    ({"NCCL_MIN_CTAS": "100"}, (512, 64), (544, 64), (128, 1), (640, 64), 4),  # capped at 64
    ({"NCCL_MIN_CTAS": "8", "NCCL_MAX_CTAS": "4"}, (512, 4), (544, 4), (128, 1), (640, 4), 4),  # min > max: max
    ({"NCCL_CGA_CLUSTER_SIZE": "1"}, (512, 24), (544, 24), (128, 1), (640, 32), 1),
    ({"NCCL_CGA_CLUSTER_SIZE": "0"}, (512, 24), (544, 24), (128, 1), (640, 32), 0),
    ({"NCCL_CGA_CLUSTER_SIZE": "12"}, (512, 24), (544, 24), (128, 1), (640, 32), 8),  # too big: 8
    ({"NCCL_CGA_CLUSTER_SIZE": "-1"}, (512, 24), (544, 24), (128, 1), (640, 32), 4),  # negative: ignored
])
def test_nccl_knobs_act_on_the_proxies_as_nccl_2_28_9_reads_them(env, allreduce, allgather, small, alltoall, cluster):
    e = emulate.Emulation.from_env(8, 280.0, env=env)
    got = [e.shape("allreduce", BIG), e.shape("allgather", BIG), e.shape("allgather", 0), e.shape("alltoall", BIG)]
    assert [(s.threads, s.ctas) for s in got] == [allreduce, allgather, small, alltoall]
    assert {s.cluster for s in got} == {cluster}
    assert {s.dynamic_smem for s in got} == {82240}  # sized for 640 threads whatever NCCL_NTHREADS says


def test_a_launchs_threads_say_its_protocol_where_nccls_rules_leave_one_reading():
    # every launch observed on 2 x H200 is read as the protocol it ran
    assert {k: nccl.protocol_of(fp.threads) for k, fp in nccl.OBSERVED_LAUNCHES.items()} == nccl.PROTOCOLS
    assert [nccl.protocol_of(t) for t in (64, 256, 96, 160, 288)] == ["LL", "LL", "SIMPLE", "SIMPLE", "SIMPLE"]
    # counts only a user's NCCL_NTHREADS makes (384 and 384 + a warp) or none makes: the trace does not say
    assert [nccl.protocol_of(t) for t in (384, 416, 1024, 32, 600)] == [None] * 5


def test_what_nccl_clamps_or_ignores_is_noted():
    knobs = nccl.Knobs.from_env({"NCCL_MAX_CTAS": "0", "NCCL_CGA_CLUSTER_SIZE": "12", "NCCL_NTHREADS": "100",
                                 "NCCL_CTA_POLICY": "7"})
    assert knobs.notes == ("NCCL_MAX_CTAS=0 is too low: NCCL ignores it",
                           "NCCL_CGA_CLUSTER_SIZE=12 is too big: NCCL uses 8",
                           "NCCL_NTHREADS=100 is not a multiple of 32: NCCL uses each protocol's maximum",
                           "NCCL_CTA_POLICY=7 is not a policy: NCCL uses 0 (default)")
    assert knobs.cta_policy == 0 and nccl.Knobs.from_env({"NCCL_CTA_POLICY": "1"}).cta_policy == 1
    assert nccl.Knobs.from_env({"NCCL_NTHREADS": "256", "NCCL_MAX_CTAS": ""}).notes == ()  # empty: unset, as NCCL
    # a policy set by hand under the emulation is not silently dropped: the results say it is not emulated, and why
    e = emulate.Emulation.from_env(8, 280.0, env={"NCCL_CTA_POLICY": "2"})
    assert e.notes() == ["NCCL_CTA_POLICY=2 (ZERO): not emulated, as NCCL would change nothing: "
                         f"{nccl.CTA_POLICY_REACH['ZERO']}"]


@pytest.mark.parametrize("var", ["NCCL_MAX_CTAS", "NCCL_MIN_CTAS", "NCCL_NTHREADS", "NCCL_CGA_CLUSTER_SIZE",
                                 "NCCL_CTA_POLICY"])
def test_a_knob_that_is_no_number_is_bad_input(var, capsys, monkeypatch):
    with pytest.raises(UsageError, match=f"{var}=four: a whole number"):
        nccl.Knobs.from_env({var: "four"})
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    monkeypatch.setenv(var, "four")
    assert main(["bench", "--comm", "emulate", "--device", "cpu", "--strategies", "default"]) == 2
    err = capsys.readouterr().err
    assert f"{var}=four: a whole number" in err and err.count("\n") == 1


def test_a_proxy_launch_is_paced_to_the_bus_bandwidth():
    e = emulate.Emulation(world=8, busbw_gbps=280.0)
    ring = emulate.ring_bytes("allreduce", BIG, 8)
    launch = Launch.plan(e.shape("allreduce", BIG), e.duration_ns(ring), unroll=4, ring=ring, dst_bytes=BIG)
    assert (launch.threads, launch.ctas, launch.cluster) == (512, 24, 4) and launch.total == ring // WORD
    steps = -(-(-(-launch.total // 24)) // (512 * 4))
    assert launch.step_ns * steps == pytest.approx(ring / 280.0, rel=1e-3)  # ~419 us for 112 MiB
    # a small collective uses the CTAs it can fill, and an all-gather writes its whole output
    small = Launch.plan(e.shape("allgather", 4096), e.duration_ns(1024), unroll=4, ring=1024, dst_bytes=4096)
    assert (small.threads, small.ctas, small.cluster) == (128, 1, 1) and small.total == 4096 // WORD


@pytest.mark.parametrize(("ring", "ctas", "cluster"), [
    (24 * 512 * 4 * WORD, 24, 4), (6 * 512 * 4 * WORD, 6, 1), (8 * 512 * 4 * WORD, 8, 4), (512 * 4 * WORD, 1, 1)])
def test_a_paced_grid_keeps_nccls_cluster_only_where_the_size_divides_it(ring, ctas, cluster):
    e = emulate.Emulation(world=8)
    launch = Launch.plan(e.shape("allreduce", BIG), e.duration_ns(ring), unroll=4, ring=ring, dst_bytes=0)
    assert (launch.ctas, launch.cluster) == (ctas, cluster)
    before_sm90 = dataclasses.replace(e, clusters=False)  # NCCL asks for no cluster there
    assert Launch.plan(before_sm90.shape("allreduce", BIG), 1, 4, ring, 0).cluster == 1


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
    monkeypatch.setenv("NCCL_MAX_CTAS", "8")  # a knob of the user's: the emulation applies it and says so
    out = tmp_path / "e.json"
    code = main(["bench", "--comm", "emulate", "--device", "cpu", "--emulate-world", "4", "--steps", "2", "--tiny",
                 "--strategies", "no-overlap,default,shape", "--repeats", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "EMULATION" in printed
    data = json.loads(out.read_text())
    assert data["provenance"]["backend"] == "ccov_emulate" and data["provenance"]["world_size"] == 1
    assert all(m["match"] for m in data["outputs_match"].values()) and set(data["outputs_match"]) == {
        "micro", "ddp", "fsdp", "tp", "moe", "diloco"}
    # diloco's background all-reduces go through the emulated group too: 3 steps, window 2, one fragment landed
    assert {r["syncs"] for r in data["rows"] if r["workload"] == "diloco" and r["status"] == "ok"} == {1}
    ok = [r for r in data["rows"] if r["status"] == "ok"]
    assert {r["strategy"] for r in ok} == {"no-overlap", "default"}
    described = ok[0]["emulation"]
    calls = described["calls"]  # one process ran every workload: the union of their collectives
    assert described["world"] == 4 and described["emulated"]
    for kind in ("allreduce", "allgather", "reduce_scatter", "alltoall"):
        assert calls.get(kind, 0) > 0, calls
    assert all(r["wrong"] == 0 for r in ok if r["workload"] == "micro")
    # the knobs applied, the footprint per kind, and the launches made per kind (on the CPU: what NCCL would launch)
    assert described["knobs"]["max_ctas"] == 8 and described["knobs"]["cluster"] == 4
    assert described["footprints"]["reduce_scatter"]["basis"].startswith("ASSUMPTION")
    assert described["footprints"]["allreduce"]["launch"]["threads"] == 512
    assert described["footprints"]["allgather"]["small"] == {
        "launch": "allgather-small", "protocol": "LL", "threads": 128, "ctas": 1, "cluster": 4, "dynamic_smem": 82240}
    launches = described["launches"]
    assert {(s["threads"], s["ctas"]) for s in launches["alltoall"]} == {(640, 8)}
    assert {s["ctas"] for kind in ("allreduce", "allgather") for s in launches[kind]} <= {1, 8}
    assert sum(s["launches"] for s in launches["allreduce"]) >= calls["allreduce"]


def test_cta_policy_is_na_under_the_emulation_with_nccls_reason():
    cfg = BenchConfig(workloads=("ddp",), device="cuda", comm="emulate",
                      strategies=("nccl-cta-policy", "nccl-cta-policy=ZERO")).resolved(gpus=1).validate()
    sets, skipped = launcher.plan(cfg, where=H200)  # nothing starts: both are n/a
    assert sets == [] and [s["reason"] for s in skipped] == [f"nccl-cta-policy: {nccl.CTA_POLICY_REACH['EFFICIENCY']}",
                                                              f"nccl-cta-policy: {nccl.CTA_POLICY_REACH['ZERO']}"]
    assert "user-registered buffers and NVLS" in skipped[0]["reason"] and "symmetric windows" in skipped[1]["reason"]
    assert [s["levers"] for s in skipped] == [{"nccl-cta-policy": "EFFICIENCY"}, {"nccl-cta-policy": "ZERO"}]
    # through real NCCL, EFFICIENCY runs (to be measured) and ZERO cannot act on PyTorch's buffers
    nccl_cfg = dataclasses.replace(cfg, comm="nccl", nproc=2, gpus=2)
    assert launcher.not_applicable(nccl_cfg, levers.strategy("nccl-cta-policy"), H200) is None
    assert launcher.not_applicable(nccl_cfg, levers.strategy("nccl-cta-policy=ZERO"), H200) == (
        f"n/a: nccl-cta-policy: {nccl.CTA_POLICY_REACH['ZERO']}")


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
