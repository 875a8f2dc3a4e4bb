import dataclasses
import json
import os
import re
import statistics

import pytest
from test_bench_tables import Recorded
from test_doctor import table_rows

from ccoverlap.gpu import cuda_driver
from ccoverlap.control import levers, startup
from ccoverlap.util import output, stats
from ccoverlap.bench import launcher, session
from ccoverlap.control.procs import Child
from ccoverlap.bench.config import TINY, BenchConfig
from ccoverlap.cli import bench as cli_bench
from ccoverlap.cli import build_parser, main

torch = pytest.importorskip("torch")
from ccoverlap.bench import worker  # noqa: E402


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workload", "ddp,gpt4"], "--workload gpt4: valid micro, ddp, fsdp, tp, moe"),
        (["--strategies", "default,turbo"], "--strategies turbo: unknown lever 'turbo': valid priority, shape"),
        (["--strategies", "nccl-threads=100"],
         "--strategies nccl-threads=100: nccl-threads=100: valid 64..512 in steps of 32"),
        (["--workload", "tp", "--nproc", "3", "--device", "cpu"], "tp: world size 3 must divide --heads 4"),
        (["--device", "cuda", "--nproc", "2"], "--device cuda with --nproc 2 needs 2 GPUs; 0 visible"),
        (["--device", "tpu"], "--device tpu: valid cpu (gloo) or cuda (nccl)"),
        (["--d-model", "65"], "--d-model 65 is not divisible by --heads 4"),
        (["--micro-sizes", "1k"], "--micro-sizes 1k: whole numbers of bytes"),
        (["--steps", "0"], "--steps=0 is out of range"),
        (["--repeats", "0"], "--repeats=0 is out of range: valid 1..1000"),
        (["--strategies", "default#2"], "--strategies default#2: '#' is not part of a strategy; name one twice"),
        # checked for every backend: an option the run does not use is still never written into --json as NaN
        (["--busbw", "nan"], "--busbw=nan is out of range: valid 1..100000 GB/s"),
        (["--busbw", "inf"], "--busbw=inf is out of range"),
        (["--micro-sizes", "0,-1"], "--micro-sizes=0 is out of range: valid 4..1099511627776 bytes"),
        (["--workload", ""], "--workload (empty): valid micro, ddp"),
        (["--micro-sizes", ""], "--micro-sizes (empty): give at least one size in bytes"),
        (["--emulate-world", "-1"], "--emulate-world=-1 is out of range: valid 2..4096"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, message, capsys, monkeypatch):
    """Refused before any rank starts."""
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    monkeypatch.setattr(launcher, "run_iter", lambda *a, **k: pytest.fail("the bench started work"))
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def env(strategy: str, stats_dir: str = "/tmp", base: dict | None = None) -> dict:
    """A rank's environment under `strategy`, started from `base` (an empty one: only what the bench adds)."""
    return launcher.rank_launch(levers.strategy(strategy), stats_dir).environ(base or {})


def test_strategy_environments():
    assert env("default") == {}  # nothing nobody asked for: no multicast switch, no interposer
    assert env("priority") == {"TORCH_NCCL_HIGH_PRIORITY": "1"}
    shaped = env("priority+shape", "/tmp/s")
    assert shaped["LD_PRELOAD"].endswith(".so") and shaped["CCOVERLAP_MODE"] == "auto"
    assert shaped["CCOVERLAP_STATS"] == "/tmp/s/interposer-%p.json" and shaped["TORCH_NCCL_HIGH_PRIORITY"] == "1"
    assert env("max-connections")["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    stray = {"CCOVERLAP_MODE": "pad", "CCOVERLAP_PAD_BYTES": "64", "CCOVERLAP_POLICY": "/p.json", "NCCL_ALGO": "Tree"}
    assert env("priority", base=stray) == {"NCCL_ALGO": "Tree", "TORCH_NCCL_HIGH_PRIORITY": "1"}  # no stray policy
    shaped = env("shape", base=stray)
    assert (shaped["CCOVERLAP_MODE"], shaped["CCOVERLAP_PAD_BYTES"], shaped["CCOVERLAP_POLICY"]) == ("auto", "", "")


H200 = levers.Host("cuda", (2, 28, 9), (9, 0), sm_carveout=True, green_contexts=True, interposer=True)


@pytest.mark.parametrize("strategy", levers.STRATEGIES, ids=lambda s: s.name)
def test_every_registry_strategy_sets_what_its_levers_set(strategy):
    """Variables as given, policy fields through the preloaded interposer (its whole policy), start-up calls
    through the hook; nothing else (no multicast switch: the device scripts set it); no-overlap reaches the
    worker through the strategy's name."""
    from ccoverlap.control.interposer import FIELDS, POLICY_ENV, Policy

    setting = strategy.setting()
    e = launcher.rank_launch(strategy, "/tmp/s").environ({})
    expected = set(setting.env)
    if setting.policy:
        policy = Policy.from_environ(e)
        assert {k: str(getattr(policy, k)) for k in setting.policy} == dict(setting.policy)
        assert (policy.stats, policy.comm) == ("/tmp/s/interposer-%p.json", None)
        expected |= {f.env for f in FIELDS} | {POLICY_ENV, "LD_PRELOAD"}
    if setting.startup:
        assert json.loads(e[startup.STARTUP_ENV]) == dict(setting.startup) and e["PYTHONPATH"] == startup.HOOK_DIR
        expected |= {startup.STARTUP_ENV, "PYTHONPATH"}
    assert e.items() >= dict(setting.env).items() and set(e) == expected
    spec = worker.spec_for(BenchConfig(), strategy.name, "/tmp")
    assert levers.strategy(spec["strategy"]).no_overlap == (strategy.name == "no-overlap")


def test_auto_sms_are_those_nccls_ctas_need():
    assert [levers.comm_sms(c, 132) for c in (1, 8, 9, 24, 130)] == [8, 8, 16, 24, 124]
    assert startup.auto_sms({}, 132) == 24  # the 24 channels NCCL set up on 2 x H200
    assert startup.auto_sms({"NCCL_MAX_CTAS": "4"}, 132) == 8 and startup.auto_sms({"NCCL_MIN_CTAS": "32"}, 132) == 32


def test_strategies_that_do_not_apply_are_named_with_the_lever():
    cpu = BenchConfig(workloads=("ddp",), device="cpu").resolved(gpus=0).validate()
    nccl = BenchConfig(workloads=("ddp",), device="cuda", comm="nccl").resolved(gpus=2).validate()
    emulated = BenchConfig(workloads=("ddp",), device="cuda", comm="emulate").resolved(gpus=1).validate()
    runs = {}
    for cfg, where in ((cpu, launcher.host(cpu)), (nccl, H200), (emulated, H200)):
        runs[cfg.comm] = {s.name: launcher.not_applicable(cfg, s, where) for s in levers.STRATEGIES}
    assert [n for n, r in runs["gloo"].items() if r is None] == ["no-overlap", "default"]
    assert all(r.startswith(f"n/a: {levers.strategy(n).levers[0][0]}: needs CUDA") for n, r in runs["gloo"].items()
               if r and n != "green")
    assert runs["gloo"]["green"] == runs["nccl"]["green"] == f"n/a: green: {levers._NO_GREEN_STREAM}"
    assert [n for n, r in runs["nccl"].items() if r] == ["green"]
    assert [n for n, r in runs["emulate"].items() if r] == ["green", "nccl-cta-policy"]


def test_strategies_are_named_as_the_registry_names_them(monkeypatch):
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    args = build_parser().parse_args(["bench", "--device", "cpu", "--strategies",
                                      "nccl-ctas=4+nccl-threads=256,priority=on"])
    cfg = cli_bench._config(args)
    assert cfg.strategies == ("nccl-ctas+nccl-threads", "priority")
    assert BenchConfig().strategies == ("no-overlap", "default", "priority", "priority+shape")
    (skipped,) = launcher.plan(dataclasses.replace(cfg, strategies=("nccl-ctas=4+nccl-threads=256",)).validate())[1]
    assert (skipped["strategy"], skipped["levers"]) == ("nccl-ctas+nccl-threads",
                                                        {"nccl-ctas": "4", "nccl-threads": "256"})


def test_summary_takes_the_slowest_rank_per_step_and_compares_losses():
    ranks = [{"rank": 0, "step_ms": [10.0, 12.0, 11.0], "compute_only_ms": [7.0, 7.0, 8.0], "losses": [2.0, 1.5],
              "note": "", "wall_s": 2.0},
             {"rank": 1, "step_ms": [11.0, 10.0, 13.0], "compute_only_ms": [8.0, 6.0, 7.0], "losses": [2.0, 1.5],
              "note": "", "wall_s": 2.5}]
    (one,) = launcher.summarize("ddp", "default", ranks, {})
    assert one["step_samples_ms"] == [11.0, 12.0, 13.0]  # the series vs_default compares: per step the slowest rank
    (row,) = launcher.aggregate([one])
    assert row["step_ms"] == 12.0 and row["step_ms_min"] == 11.0 and row["step_ms_max"] == 13.0 and row["wall_s"] == 2.5
    assert row["compute_only_ms"] == 8.0 and row["exposed_comm_ms"] == 4.0
    other = dict(one, strategy="priority", losses=[2.0, 1.5000001])
    verdict = launcher.compare([one, other])["ddp"]
    assert verdict["match"] and verdict["how"].startswith("max relative loss difference")
    assert not launcher.compare([one, dict(one, strategy="x", losses=[2.0, 1.6])])["ddp"]["match"]
    # a second process set of the same strategy is held to the first as well
    assert not launcher.compare([one, dict(one, repeat=2, losses=[2.0, 1.6])])["ddp"]["match"]
    failed = {"workload": "tp", "strategy": "default", "status": "failed: boom"}
    assert launcher.compare([failed])["tp"] == {"match": False, "how": "no strategy ran"}


def test_cuda_only_strategies_are_listed_not_run():
    cfg = BenchConfig(workloads=("ddp",), strategies=("priority", "shape"), size=TINY).resolved(gpus=0).validate()
    sets, skipped = launcher.plan(cfg)
    assert sets == [] and launcher.run(cfg) == []
    assert skipped == [{"strategy": "priority", "levers": {"priority": "on"}, "reason": "priority: needs CUDA or ROCm"},
                       {"strategy": "shape", "levers": {"shape": "auto"}, "reason": "shape: needs CUDA or ROCm"}]


@pytest.fixture
def progress(monkeypatch) -> list[Recorded]:
    """The bench's progress of each run, keeping what it named as running (a terminal's bar)."""
    made: list[Recorded] = []
    monkeypatch.setattr(session, "Progress", lambda what, total: made.append(Recorded(what, total)) or made[-1])
    monkeypatch.setattr(output.Progress, "LINE_EVERY_S", 0.0)  # a line for every set, however quick
    return made


@pytest.mark.parametrize("workload", ["micro", "ddp", "fsdp", "tp", "moe", "diloco"])
def test_every_workload_runs_on_cpu_with_gloo(workload, tmp_path, monkeypatch, capsys, progress):
    """Each workload's default on two gloo ranks; ddp's and diloco's no-overlap beside it, compared (each set is
    two fresh processes: the suite's time on two cores)."""
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    out = tmp_path / "r.json"
    run = ("no-overlap", "default") if workload in ("ddp", "diloco") else ("default",)
    code = main(["bench", "--workload", workload, "--device", "cpu", "--nproc", "2", "--steps", "3", "--tiny",
                 "--strategies", ",".join((*run, "priority")), "--repeats", "1", "--json", str(out)])
    assert code == 0, capsys.readouterr()
    data = json.loads(out.read_text())
    assert data["complete"] and data["provenance"]["backend"] == "gloo" and data["provenance"]["world_size"] == 2
    assert data["outputs_match"][workload]["match"]
    rows = data["rows"]
    assert list(dict.fromkeys(r["strategy"] for r in rows)) == list(run) and all(r["status"] == "ok" for r in rows)
    assert data["not_applicable"] == [{"strategy": "priority", "levers": {"priority": "on"},
                                       "reason": "priority: needs CUDA or ROCm"}]
    assert all(list(r)[:3] == ["workload", "strategy", "levers"] for r in rows)
    assert {r["strategy"]: r["levers"] for r in rows} == dict.fromkeys(run, {})
    assert [(s["strategy"], s["repeat"], s["ok"]) for s in data["sets"]] == [(label, 1, True) for label in run]
    ok = rows
    if workload == "micro":
        assert all(r["wrong"] == 0 and r["busbw_GBps"] == pytest.approx(r["algbw_GBps"]) for r in ok)  # 2(n-1)/n = 1
    else:
        assert all(len(r["runs"][0]["samples"]["rank0"]) == 3 and r["step_ms"] > 0 for r in ok)
        assert all((r["exposed_comm_ms"] is not None) == (workload in ("ddp", "diloco")) for r in ok)
        # a workload's counters: diloco lands one fragment per step after its window (1 warm-up + 3 steps, window 2)
        assert all(("syncs" in r) == (workload == "diloco") for r in ok)
        if workload == "diloco":
            assert {(r["strategy"], r["syncs"]) for r in ok} == {("no-overlap", 2), ("default", 2)}
            assert all(r["late_syncs"] >= 0 and r["stall_ms"] >= 0 for r in ok)
            assert next(r for r in ok if r["strategy"] == "no-overlap")["late_syncs"] == 0  # waited at launch
    # every ok row but default's is timed against default's (micro: of its size), one run of 3 steps each
    assert all(("vs_default" in r) == (r["strategy"] != "default") for r in ok)
    compared = [r["vs_default"] for r in ok if r["strategy"] != "default"]
    assert bool(compared) == (len(run) == 2) and all(c["runs"] == [1, 1] and c["steps"] == [3, 3]
                            and c["ci"][0] <= c["ratio"] <= c["ci"][1]
                            and c["verdict"] in ("faster", "slower", "within noise") and c["processes"] == 1
                            for c in compared)
    printed = capsys.readouterr()
    assert any("vs default (95% CI)" in row for row in table_rows(printed.out))
    assert printed.out.count("needs CUDA or ROCm") == 1
    # rank 0's workload reached the bar
    assert f"set {len(run)}/{len(run)}: default repeat 1/1: {workload}" in progress[0].labels
    n = len(run)
    # a log's line
    assert re.search(rf"^bench: {n}/{n} done \(\d+ s\), last set {n}/{n}: default repeat 1/1$", printed.err,
                     re.MULTILINE)
    assert out.with_suffix(".png").stat().st_size > 5000


def test_traces_land_where_analyze_reads_a_workload(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    traces = tmp_path / "traces"
    assert main(["bench", "--workload", "ddp", "--device", "cpu", "--nproc", "2", "--steps", "2", "--tiny",
                 "--strategies", "default", "--repeats", "1", "--trace", str(traces)]) == 0
    assert sorted(p.relative_to(traces).as_posix() for p in traces.rglob("*.json.gz")) == [
        "ddp/default/rank0_trace.json.gz", "ddp/default/rank1_trace.json.gz"]
    capsys.readouterr()
    # CPU traces hold no GPU kernels: analyze reads them as a CPU timeline (issue 33's CPU path), both ranks
    assert main(["analyze", str(traces / "ddp")]) == 0
    out, err = capsys.readouterr()
    assert "CPU timeline" in out and "Traceback" not in err
    assert [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("default ")] == ["0", "1"]


def test_a_failing_rank_stops_the_others_at_once():
    import sys
    import time

    sleeper = Child([sys.executable, "-c", "import time; time.sleep(60)"], os.environ)
    failer = Child([sys.executable, "-c", "import sys; sys.exit(3)"], os.environ)
    t0 = time.monotonic()
    assert launcher.wait_all([sleeper, failer], timeout_s=30) == (1, 3)
    assert time.monotonic() - t0 < 10 and sleeper.returncode is not None


def test_ranks_that_outlive_the_timeout_are_killed():
    import sys

    slow = Child([sys.executable, "-c", "import time; time.sleep(60)"], os.environ)
    assert launcher.wait_all([slow], timeout_s=0.5) == (0, "timeout") and slow.returncode is not None


def test_missing_torchrun_is_one_line_exit_2(monkeypatch, capsys):
    import shutil

    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["bench", "--workload", "ddp", "--device", "cpu", "--strategies", "default",
                 "--launcher", "torchrun"]) == 2
    err = capsys.readouterr().err
    assert "torchrun is not on PATH" in err and err.count("\n") == 1


def _aa_run(tmp_path, attempt: int) -> dict:
    out, traces = tmp_path / f"aa{attempt}.json", tmp_path / f"traces{attempt}"
    # one rank a set: six sets on 2 cores
    code = main(["bench", "--workload", "ddp", "--device", "cpu", "--nproc", "1", "--tiny", "--strategies",
                 "default,default", "--repeats", "3", "--trace", str(traces), "--json", str(out)])
    assert code == 0
    assert sorted(p.relative_to(traces).as_posix() for p in traces.rglob("*.json.gz")) == sorted(
        f"ddp/{label}/rank0_trace.json.gz" for label in ("default", "default#2"))
    return json.loads(out.read_text())


def test_an_aa_check_finds_nothing_beyond_the_noise(tmp_path, monkeypatch, progress):
    """default against itself, three fresh process sets each, interleaved: the rows named apart, each merged from
    its sets (traced in the first only), the comparison over the sets with their medians, the progress naming
    each; and the verdict "within noise". That verdict is a 95% test, so an A/A run calls a difference now and
    then (bench/aa_cpu.py records 20 runs): a second run settles it."""
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    data = _aa_run(tmp_path, 1)
    assert [(s["strategy"], s["repeat"]) for s in data["sets"]] == [
        ("default", 1), ("default#2", 1), ("default", 2), ("default#2", 2), ("default", 3), ("default#2", 3)]
    assert all(f"set {i}/6: {label} repeat {(i + 1) // 2}/3: ddp" in progress[0].labels
               for i, label in zip(range(1, 7), ["default", "default#2"] * 3))
    base, twin = data["rows"]
    assert (base["strategy"], twin["strategy"], twin["levers"]) == ("default", "default#2", {})
    assert [r["repeat"] for r in twin["runs"]] == [1, 2, 3] and [r["order"] for r in twin["runs"]] == [2, 4, 6]
    c = twin["vs_default"]
    assert c["processes"] == 3 and c["runs"] == [3, 3] and c["steps"] == [9, 9]  # the CPU preset: 3 steps a set
    assert c["run_medians_ms"] == [[statistics.median(r["step_samples_ms"]) for r in row["runs"]]
                                   for row in (base, twin)]
    assert data["outputs_match"]["ddp"] == {"match": True, "how": "bitwise"}  # every set computed the same losses
    if c["verdict"] != stats.NOISE:
        data = _aa_run(tmp_path, 2)
    assert data["rows"][1]["vs_default"]["verdict"] == stats.NOISE
    assert data["best"] == {"ddp": "ddp: nothing beyond the noise of 3 process sets per strategy"}
