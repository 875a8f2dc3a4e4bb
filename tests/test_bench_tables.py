"""The bench's rows against `default`: each strategy's process sets merged into its row, ratio, interval and
verdict per row (per size for micro), the best line per workload, the strategies not run listed once; in the
JSON, the printed tables and the chart; the order of the process sets and what their progress says. CPU only,
synthetic rows (no ranks) except where the CLI is run."""
import json
import random
import re
import signal
import statistics
import time
from pathlib import Path

import pytest
from test_doctor import table_rows

from ccoverlap.gpu import cuda_driver
from ccoverlap.control import levers
from ccoverlap.util import output, stats
from ccoverlap.bench import launcher, plots, schedule, session
from ccoverlap.bench.catalog import RUNS, SERIES, VS_DEFAULT_COLUMN, series, vs_default_note
from ccoverlap.bench.config import BenchConfig
from ccoverlap.cli import main


def _series(mean: float, noise: float, seed: int, n: int = 20) -> list[float]:
    rng = random.Random(seed)
    return [mean + rng.gauss(0, noise) for _ in range(n)]


def _process_rows(strategy: str, means: list[float], noise: float, seed: int, workload: str = "ddp",
                  **extra) -> list[dict]:
    """One process set's row per mean (its repeat 1..N), as summarize makes them for a steps workload."""
    return [{"workload": workload, "strategy": strategy, "levers": {}, "status": "ok", "repeat": i, "order": i,
             SERIES: _series(m, noise, seed + i), "samples": {}, "compute_samples_ms": None, "exposed_comm_note": None,
             "counters": {}, "losses": [1.0], "interposer": None, "wall_s": 1.0, **extra}
            for i, m in enumerate(means, 1)]


def _mixed() -> list[dict]:
    """Merged rows: default at 50 ms in 3 process sets; one strategy clearly faster, one the same within its
    noise, one clearly slower."""
    return launcher.aggregate(_process_rows("default", [50, 50, 50], 0.5, 1)
                              + _process_rows("fast", [45, 45, 45], 0.5, 10)
                              + _process_rows("same", [50, 50, 50], 5.0, 20)
                              + _process_rows("slow", [56, 56, 56], 0.5, 30))


def test_rows_get_the_verdict_of_their_interval_against_default():
    rows = _mixed()
    assert launcher.against_default(rows) == {"ddp": None}
    by = {r["strategy"]: r for r in rows}
    assert "vs_default" not in by["default"]  # the baseline
    assert ([by[s]["vs_default"]["verdict"] for s in ("fast", "same", "slow")]
            == [stats.FASTER, stats.NOISE, stats.SLOWER])
    fast = by["fast"]["vs_default"]
    # exactly stats.compare of the process sets' series the table's medians come from, one run per set
    assert fast == stats.compare(series(by["default"]), series(by["fast"])).to_dict() | {"processes": 3}
    assert fast["runs"] == [3, 3] and fast["steps"] == [60, 60] and fast["processes"] == 3
    assert fast["run_medians_ms"] == [[statistics.median(s) for s in series(by[n])] for n in ("default", "fast")]
    assert fast["ratio"] == pytest.approx(by["fast"]["step_ms"] / by["default"]["step_ms"])
    assert fast["ci"][0] <= fast["ratio"] <= fast["ci"][1] < 1
    same = by["same"]["vs_default"]
    assert same["ci"][0] < 1 < same["ci"][1]
    assert launcher.best(rows) == {"ddp": "ddp: best beyond the noise of 3 process sets per strategy: fast "
                                          + stats.Comparison.from_dict(fast).label()}


def test_noise_between_process_sets_is_what_the_verdict_weighs():
    """Steps that agree within each process set, but sets that wander by 5%: a 2% gap is no verdict."""
    rows = launcher.aggregate(_process_rows("default", [50, 52.5, 47.5], 0.1, 1)
                              + _process_rows("b", [49, 51.5, 46.5], 0.1, 9))
    launcher.against_default(rows)
    assert rows[1]["vs_default"]["verdict"] == stats.NOISE
    assert launcher.best(rows) == {"ddp": "ddp: nothing beyond the noise of 3 process sets per strategy"}
    cut = launcher.aggregate(_process_rows("default", [50, 52.5, 47.5], 0.1, 1)
                             + _process_rows("b", [49, 51.5], 0.1, 9))
    launcher.against_default(cut)  # a run cut short: fewer sets for the strategies it had not finished
    assert launcher.best(cut) == {"ddp": "ddp: nothing beyond the noise of 2-3 process sets per strategy"}
    one = launcher.aggregate(_process_rows("default", [50], 0.1, 1) + _process_rows("b", [49], 0.1, 9))
    launcher.against_default(one)  # one set each: only the steps' noise is seen, and it calls the same gap
    assert one[1]["vs_default"]["verdict"] == stats.FASTER and one[1]["vs_default"]["processes"] == 1


def test_process_sets_merge_into_one_row_per_strategy():
    sets = _process_rows("default", [50, 60], 0.0, 1, workload="diloco")
    sets[0] |= {"compute_samples_ms": [40.0] * 20, "counters": {"syncs": 2, "late_syncs": 0}}
    sets[1] |= {"compute_samples_ms": [44.0] * 20, "counters": {"syncs": 2, "late_syncs": 1}, "losses": [1.0]}
    (row,) = launcher.aggregate(sets)
    assert row["step_ms"] == 55.0 and (row["step_ms_min"], row["step_ms_max"]) == (50.0, 60.0)  # pooled
    assert row["compute_only_ms"] == 42.0 and row["exposed_comm_ms"] == 13.0
    assert (row["syncs"], row["late_syncs"]) == (2, 1)  # the worst set's
    assert [r["repeat"] for r in row[RUNS]] == [1, 2] and series(row) == [s[SERIES] for s in sets]
    assert row["wall_s"] == 2.0 and "repeat" not in row and row["status"] == "ok"
    failed = sets + [{"workload": "diloco", "strategy": "default", "levers": {}, "repeat": 3, "status": "failed: boom"}]
    assert launcher.aggregate(failed) == [{"workload": "diloco", "strategy": "default", "levers": {},
                                           "status": "failed: repeat 3/3: boom"}]


@pytest.mark.parametrize("default_status", [None, "failed: boom"])
def test_without_a_default_rows_say_there_is_nothing_to_compare_with(default_status, capsys):
    rows = [r for r in _mixed() if r["strategy"] != "default"]
    if default_status:
        rows.append({"workload": "ddp", "strategy": "default", "status": default_status})
    unmatched = launcher.against_default(rows)
    assert unmatched == {"ddp": launcher.NO_DEFAULT}
    assert all(r["vs_default"] is None for r in rows if r["status"] == "ok")
    session._print(rows, launcher.compare(rows), unmatched, launcher.best(rows), [], 3)
    out = capsys.readouterr().out
    assert "no default to compare with" in out.splitlines()[0] and "ddp: nothing compared with default" in out
    assert not any(word in out for word in (stats.FASTER, stats.SLOWER, stats.NOISE + " "))


def test_one_timed_step_gives_no_verdict():
    rows = launcher.aggregate(_process_rows("default", [50], 0, 1, **{SERIES: [50.0]})
                              + _process_rows("fast", [40], 0, 1, **{SERIES: [40.0]}))
    assert launcher.against_default(rows) == {"ddp": launcher.ONE_STEP}
    assert rows[1]["vs_default"] is None  # the bootstrap of one step is a zero-width interval: no evidence
    # one step in each of three process sets: the sets themselves are resampled
    three = launcher.aggregate(_process_rows("default", [50] * 3, 0, 1, **{SERIES: [50.0]})
                               + _process_rows("fast", [40] * 3, 0, 1, **{SERIES: [40.0]}))
    assert launcher.against_default(three) == {"ddp": None} and three[1]["vs_default"]["steps"] == [3, 3]


def _sizes(strategy: str, means: dict[int, float], noise: float, seed: int) -> list[dict]:
    return [{"workload": "micro", "strategy": strategy, "levers": {}, "status": "ok", "repeat": 1, "size_bytes": size,
             "count": size // 4, "type": "float32", "time_ms": 1.0, "algbw_GBps": 2.0, "busbw_GBps": 2.0,
             "gemm_ms": 0.5, "wrong": 0, "interposer": None, "samples": {}, SERIES: _series(m, noise, seed + size)}
            for size, m in means.items()]


def test_micro_rows_are_compared_size_by_size():
    rows = launcher.aggregate(_sizes("default", {4096: 1.0, 1 << 20: 10.0}, 0.01, 0)
                              + _sizes("priority", {4096: 0.8, 1 << 20: 12.0, 1 << 24: 50.0}, 0.01, 100))
    assert launcher.against_default(rows) == {"micro": None}
    got = {r["size_bytes"]: r.get("vs_default") for r in rows if r["strategy"] == "priority"}
    assert got[4096]["verdict"] == stats.FASTER and got[4096]["ratio"] == pytest.approx(0.8, rel=0.01)
    assert got[1 << 20]["verdict"] == stats.SLOWER and got[1 << 20]["ratio"] == pytest.approx(1.2, rel=0.01)
    assert got[1 << 24] is None  # default has no row of that size
    assert launcher.best(rows)["micro"].startswith("micro: best beyond the noise of 1 process set per strategy: "
                                                   "priority size_bytes=4096 0.8")


def test_the_printed_table_shows_the_comparison_and_what_it_covers(capsys):
    rows = _mixed()
    unmatched = launcher.against_default(rows)
    skipped = [{"strategy": "priority", "levers": {"priority": "on"}, "reason": "priority: needs CUDA or ROCm"}]
    session._print(rows, launcher.compare(rows), unmatched, launcher.best(rows), skipped, 3)
    out = capsys.readouterr().out
    header, *body = table_rows(out)
    lines = {row[0]: " ".join(row) for row in body}
    assert VS_DEFAULT_COLUMN in header and VS_DEFAULT_COLUMN == "vs default (95% CI)"
    assert "baseline" in lines["default"] and "priority" not in lines  # not run here: no row
    for strategy in ("fast", "same", "slow"):
        label = stats.Comparison.from_dict(rows[[r["strategy"] for r in rows].index(strategy)]["vs_default"]).label()
        assert label in lines[strategy]
    assert "faster" in lines["fast"] and "slower" in lines["slow"]
    assert "~ " in lines["same"] and "within noise" in lines["same"]  # never read as an effect
    assert not any("~" in lines[s] for s in ("fast", "slow", "default"))
    assert "(" in lines["fast"] and "-" in lines["fast"]  # the (min-max) column stays
    assert "ddp: best beyond the noise of 3 process sets per strategy: fast" in out
    assert out.count("priority: needs CUDA or ROCm") == 1 and "not run here: priority (priority: needs CUDA" in out
    assert vs_default_note(3) in out and "noise between processes is in it" in vs_default_note(3)
    assert "step-to-step noise only" in vs_default_note(1)


def test_the_chart_hatches_bars_within_noise_and_labels_each(tmp_path, monkeypatch):
    from matplotlib.container import BarContainer

    drawn = {}
    monkeypatch.setattr(plots, "save_png", lambda fig, path: drawn.setdefault("fig", fig) and path)
    rows = _mixed()
    launcher.against_default(rows)
    plots.bars(rows, tmp_path / "b.png")
    (ax,) = drawn["fig"].axes
    (steps,) = [c for c in ax.containers if isinstance(c, BarContainer)]
    names = [r["strategy"] for r in rows]  # one bar each, in order
    assert [s for s, bar in zip(names, steps) if bar.get_hatch()] == ["same"]
    texts = [t.get_text() for t in ax.texts]
    assert ("baseline" in texts and any(t.endswith("x faster") for t in texts)
            and any(t.endswith("within noise") for t in texts))
    # whiskers: the fastest and the slowest step of any of the row's process sets
    (lo, hi) = steps.errorbar.lines[2][0].get_segments()[names.index("slow")][:, 0]
    slow = [x for run in series(rows[3]) for x in run]
    assert (lo, hi) == pytest.approx((min(slow), max(slow)))


def test_process_sets_run_interleaved_and_strategies_named_twice_apart():
    cfg = BenchConfig(workloads=("ddp",), device="cpu", strategies=("default", "default", "priority", "no-overlap"),
                      repeats=2).resolved(gpus=0).validate()
    assert cfg.strategies == ("default", "default#2", "priority", "no-overlap")
    sets, skipped = launcher.plan(cfg)
    assert [(ps.label, ps.repeat, ps.index) for ps in sets] == [
        ("default", 1, 1), ("default#2", 1, 2), ("no-overlap", 1, 3),
        ("default", 2, 4), ("default#2", 2, 5), ("no-overlap", 2, 6)]
    assert all(ps.strategy == levers.strategy("default") for ps in sets[:2])
    assert skipped == [{"strategy": "priority", "levers": {"priority": "on"}, "reason": "priority: needs CUDA or ROCm"}]
    assert (BenchConfig(strategies=("all",)).resolved(gpus=0).validate().strategies
            == tuple(s.name for s in levers.STRATEGIES))


class Recorded(output.Progress):
    """The bench's progress, keeping what it named as running (what a terminal's bar shows)."""

    def __init__(self, what: str, total: int):
        super().__init__(what, total)
        self.labels: list[str] = []

    def running(self, label: str) -> None:
        self.labels.append(label)
        super().running(label)


def test_the_progress_counts_process_sets_and_names_what_runs(monkeypatch, capsys):
    """Running: the set, its strategy and repeat, then each workload rank 0 begins; in a log, a line as each set
    ends with the time so far and the whole run's estimate."""
    from ccoverlap.bench import worker

    def ranks(cfg, strategy, launcher_name, label, progress):
        for workload in cfg.workloads:
            worker._say(progress, workload)
            # the watch looks every POLL_S, from a thread a loaded machine may starve: wait until it has seen it
            deadline = time.monotonic() + 30
            while not (bar.labels and bar.labels[-1].endswith(workload)) and time.monotonic() < deadline:
                time.sleep(0.01)
        raise RuntimeError("no ranks in this test")

    monkeypatch.setattr(schedule, "POLL_S", 0.02)
    monkeypatch.setattr(launcher, "run_ranks", ranks)
    monkeypatch.setattr(output.Progress, "LINE_EVERY_S", 0.0)
    cfg = BenchConfig(workloads=("micro", "ddp"), device="cpu", strategies=("default", "default"),
                      repeats=1).resolved(gpus=0).validate()
    with Recorded("bench", 2) as bar:
        rows = [r for _, new, _ in launcher.run_iter(cfg, progress=bar) for r in new]
    assert bar.labels == ["set 1/2: default repeat 1/1: starting ranks", "set 1/2: default repeat 1/1: micro",
                        "set 1/2: default repeat 1/1: ddp", "set 2/2: default#2 repeat 1/1: starting ranks",
                        "set 2/2: default#2 repeat 1/1: micro", "set 2/2: default#2 repeat 1/1: ddp"]
    assert {r["status"] for r in rows} == {"failed: no ranks in this test"}
    first, last = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"bench: 1/2 done \(\d+ s of ~\d+ s\), last set 1/2: default repeat 1/1", first)
    assert re.fullmatch(r"bench: 2/2 done \(\d+ s\), last set 2/2: default#2 repeat 1/1", last)


def test_the_workload_rank_0_began_reaches_the_launcher(tmp_path):
    from ccoverlap.bench import worker

    seen = []
    told = tmp_path / "progress"
    with schedule.watch(told, seen.append):
        for name in ("micro", "ddp"):
            worker._say(str(told), name)
            deadline = time.monotonic() + 30  # a starved watching thread: see the test above
            while (not seen or seen[-1] != name) and time.monotonic() < deadline:
                time.sleep(0.05)
    assert seen == ["micro", "ddp"] and not told.exists()


def _fake_sets(cfg, launcher_name="spawn", sets=None, progress=None):
    for ps, means in zip(sets, ([50, 50], [56, 56])):
        yield ps, _process_rows(ps.label, means[:1], 0.5, 40 + ps.index, repeat=ps.repeat, order=ps.index), 1.5


def test_a_stopped_run_still_compares_the_rows_it_has(tmp_path, monkeypatch, capsys):
    def two_then_stop(cfg, launcher_name="spawn", sets=None, progress=None):
        yield from _fake_sets(cfg, launcher_name, sets[:2], progress)
        raise launcher.Stopped(signal.SIGINT)

    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    monkeypatch.setattr(launcher, "run_iter", two_then_stop)
    out = tmp_path / "r.json"
    assert main(["bench", "--workload", "ddp", "--strategies", "default,no-overlap", "--repeats", "2",
                 "--json", str(out)]) == 130
    data = json.loads(out.read_text())
    assert data["interrupted"] == "SIGINT" and [r["strategy"] for r in data["rows"]] == ["default", "no-overlap"]
    assert data["rows"][1]["vs_default"]["verdict"] == stats.SLOWER and "vs_default" not in data["rows"][0]
    assert [(s["set"], s["strategy"], s["repeat"], s["wall_s"]) for s in data["sets"]] == [
        (1, "default", 1, 1.5), (2, "no-overlap", 1, 1.5)]
    assert data["wall_s"] == 3.0 and data["best"] == {"ddp": "ddp: nothing beyond the noise of 1 process set per "
                                                             "strategy (interrupted by SIGINT: on the sets run so far)"}


def test_results_are_written_after_every_process_set(tmp_path, monkeypatch):
    seen = []
    real_write = session.write_json

    def spy(out, document, **kw):
        real_write(out, document, **kw)
        data = json.loads(Path(out).read_text())
        seen.append((data["complete"], len(data["sets"]), [len(r[RUNS]) for r in data["rows"]],
                     all("vs_default" not in r for r in data["rows"])))

    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    monkeypatch.setattr(launcher, "run_iter", _fake_sets)
    monkeypatch.setattr(session, "write_json", spy)
    assert main(["bench", "--workload", "ddp", "--strategies", "default,priority,no-overlap", "--repeats", "1",
                 "--json", str(tmp_path / "r.json")]) == 0
    # while the run goes on no bootstrap competes with the ranks for the CPU; the last write has the verdicts
    assert seen == [(False, 1, [1], True), (False, 2, [1, 1], True), (True, 2, [1, 1], False)]
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["not_applicable"] == [{"strategy": "priority", "levers": {"priority": "on"},
                                       "reason": "priority: needs CUDA or ROCm"}]


def test_tables_are_readable_at_80_columns(capsys):
    """In a log or a pipe: no line past 80 characters, no word or number cut (no ellipsis), and the micro table's
    status (why a row failed) in a column of its own, whole."""
    rows = _mixed()
    rows[1]["strategy"] = "nccl-threads+shape+priority"
    micro = launcher.aggregate(_sizes("default", {4096: 3.25, 64 << 20: 9.5}, 0.01, 0)
                               + _sizes("carveout-hint+priority", {4096: 3.2, 64 << 20: 9.0}, 0.01, 50))
    why = "failed: repeat 2/3: the bench's temporary folder /tmp/ccoverlap-bench-x: No such file or directory"
    micro.append({"workload": "micro", "strategy": "nccl-cta-policy", "levers": {}, "status": why})
    rows += micro
    unmatched = launcher.against_default(rows)
    session._print(rows, launcher.compare(rows), unmatched, launcher.best(rows), [], 3)
    out = capsys.readouterr().out
    tables = out.split("micro: ")
    assert max(len(line) for t in tables for line in t.splitlines() if "│" in line or "┃" in line) <= 80
    assert "…" not in out
    header, *body = table_rows(tables[1])
    assert header[-1] == "status" and body[-1][-1] == why
    assert [r[1] for r in body[:2]] == ["4KiB", "64MiB"] and body[0][-1] == "ok"
