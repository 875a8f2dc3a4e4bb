"""The bench's rows against `default`: ratio, interval and verdict per row (per size for micro), in the JSON,
the printed tables and the chart. CPU only, synthetic rows (no ranks) except where the CLI is run."""
import json
import random
import signal
import statistics

import pytest
from test_doctor import table_rows

from ccoverlap.gpu import cuda_driver
from ccoverlap.util import stats
from ccoverlap.bench import launcher, plots
from ccoverlap.bench.catalog import SERIES, VS_DEFAULT_COLUMN, VS_DEFAULT_NOTE
from ccoverlap.cli import bench as cli_bench
from ccoverlap.cli import main


def _series(mean: float, noise: float, seed: int, n: int = 20) -> list[float]:
    rng = random.Random(seed)
    return [mean + rng.gauss(0, noise) for _ in range(n)]


def _row(strategy: str, series: list[float], workload: str = "ddp", **extra) -> dict:
    return {"workload": workload, "strategy": strategy, "status": "ok", "step_ms": statistics.median(series),
            "step_ms_min": min(series), "step_ms_max": max(series), "compute_only_ms": None, "exposed_comm_ms": None,
            "losses": [1.0], SERIES: series, **extra}


def _mixed() -> list[dict]:
    """default at 50 ms; one strategy clearly faster, one the same within its noise, one clearly slower."""
    return [_row("default", _series(50, 0.5, 1)), _row("fast", _series(45, 0.5, 2)),
            _row("same", _series(50, 5.0, 3)), _row("slow", _series(56, 0.5, 4)),
            {"workload": "ddp", "strategy": "priority", "status": "n/a: priority: needs CUDA or ROCm"}]


def test_rows_get_the_verdict_of_their_interval_against_default():
    rows = _mixed()
    assert launcher.against_default(rows) == {"ddp": None}
    by = {r["strategy"]: r for r in rows}
    assert "vs_default" not in by["default"] and "vs_default" not in by["priority"]  # the baseline; did not run
    assert [by[s]["vs_default"]["verdict"] for s in ("fast", "same", "slow")] == [stats.FASTER, stats.NOISE, stats.SLOWER]
    fast = by["fast"]["vs_default"]
    # exactly stats.compare of the two series the table's medians come from, one run each
    assert fast == stats.compare([by["default"][SERIES]], [by["fast"][SERIES]]).to_dict()
    assert fast["runs"] == [1, 1] and fast["steps"] == [20, 20]
    assert fast["ratio"] == pytest.approx(by["fast"]["step_ms"] / by["default"]["step_ms"])
    assert fast["ci"][0] <= fast["ratio"] <= fast["ci"][1] < 1
    same = by["same"]["vs_default"]
    assert same["ci"][0] < 1 < same["ci"][1]


@pytest.mark.parametrize("default_status", [None, "failed: boom", "n/a: shape: needs CUDA or ROCm"])
def test_without_a_default_rows_say_there_is_nothing_to_compare_with(default_status, capsys):
    rows = [r for r in _mixed() if r["strategy"] != "default"]
    if default_status:
        rows.append({"workload": "ddp", "strategy": "default", "status": default_status})
    unmatched = launcher.against_default(rows)
    assert unmatched == {"ddp": launcher.NO_DEFAULT}
    assert all(r["vs_default"] is None for r in rows if r["status"] == "ok")
    cli_bench._print(rows, launcher.compare(rows), unmatched)
    out = capsys.readouterr().out
    assert "no default to compare with" in out.splitlines()[0]
    assert not any(word in out for word in (stats.FASTER, stats.SLOWER, stats.NOISE + " "))


def test_one_timed_step_gives_no_verdict():
    rows = [_row("default", [50.0]), _row("fast", [40.0])]
    assert launcher.against_default(rows) == {"ddp": launcher.ONE_STEP}
    assert rows[1]["vs_default"] is None  # the bootstrap of one step is a zero-width interval: no evidence


def _sizes(strategy: str, means: dict[int, float], noise: float, seed: int) -> list[dict]:
    return [_row(strategy, _series(m, noise, seed + size), "micro", size_bytes=size, wrong=0)
            for size, m in means.items()]


def test_micro_rows_are_compared_size_by_size():
    rows = (_sizes("default", {4096: 1.0, 1 << 20: 10.0}, 0.01, 0)
            + _sizes("priority", {4096: 0.8, 1 << 20: 12.0, 1 << 24: 50.0}, 0.01, 100))
    assert launcher.against_default(rows) == {"micro": None}
    got = {r["size_bytes"]: r.get("vs_default") for r in rows if r["strategy"] == "priority"}
    assert got[4096]["verdict"] == stats.FASTER and got[4096]["ratio"] == pytest.approx(0.8, rel=0.01)
    assert got[1 << 20]["verdict"] == stats.SLOWER and got[1 << 20]["ratio"] == pytest.approx(1.2, rel=0.01)
    assert got[1 << 24] is None  # default has no row of that size


def test_the_printed_table_shows_the_comparison_and_what_it_covers(capsys):
    rows = _mixed()
    unmatched = launcher.against_default(rows)
    cli_bench._print(rows, launcher.compare(rows), unmatched)
    out = capsys.readouterr().out
    header, *body = table_rows(out)
    lines = {row[0]: " ".join(row) for row in body}
    assert VS_DEFAULT_COLUMN in header and VS_DEFAULT_COLUMN == "vs default (95% CI)"
    assert "baseline" in lines["default"]
    for strategy in ("fast", "same", "slow"):
        label = stats.Comparison.from_dict(rows[[r["strategy"] for r in rows].index(strategy)]["vs_default"]).label()
        assert label in lines[strategy]
    assert "faster" in lines["fast"] and "slower" in lines["slow"]
    assert "~ " in lines["same"] and "within noise" in lines["same"]  # never read as an effect
    assert not any("~" in lines[s] for s in ("fast", "slow", "default"))
    assert "(" in lines["fast"] and "-" in lines["fast"]  # the (min-max) column stays
    assert VS_DEFAULT_NOTE in out and "step-to-step noise only" in VS_DEFAULT_NOTE and "ccoverlap tune" in VS_DEFAULT_NOTE


def test_the_chart_hatches_bars_within_noise_and_labels_each(tmp_path, monkeypatch):
    from matplotlib.container import BarContainer

    drawn = {}
    monkeypatch.setattr(plots, "save_png", lambda fig, path: drawn.setdefault("fig", fig) and path)
    rows = _mixed()
    launcher.against_default(rows)
    plots.bars(rows, tmp_path / "b.png")
    (ax,) = drawn["fig"].axes
    (steps,) = [c for c in ax.containers if isinstance(c, BarContainer)]
    names = [r["strategy"] for r in rows if r["status"] == "ok"]  # one bar each, in order
    assert [s for s, bar in zip(names, steps) if bar.get_hatch()] == ["same"]
    texts = [t.get_text() for t in ax.texts]
    assert "baseline" in texts and any(t.endswith("x faster") for t in texts) and any(t.endswith("within noise") for t in texts)
    # whiskers: the fastest and the slowest step of the row's series
    (lo, hi) = steps.errorbar.lines[2][0].get_segments()[names.index("slow")][:, 0]
    slow = rows[3]
    assert (lo, hi) == pytest.approx((min(slow[SERIES]), max(slow[SERIES])))


def test_a_stopped_run_still_compares_the_rows_it_has(tmp_path, monkeypatch, capsys):
    def two_then_stop(cfg, launcher_name="spawn"):
        rows = _mixed()
        yield "default", rows[:1]
        yield "slow", rows[3:4]
        raise launcher.Stopped(signal.SIGINT)

    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    monkeypatch.setattr(launcher, "run_iter", two_then_stop)
    out = tmp_path / "r.json"
    assert main(["bench", "--workload", "ddp", "--strategies", "default", "--json", str(out)]) == 130
    data = json.loads(out.read_text())
    assert data["interrupted"] == "SIGINT" and [r["strategy"] for r in data["rows"]] == ["default", "slow"]
    assert data["rows"][1]["vs_default"]["verdict"] == stats.SLOWER and "vs_default" not in data["rows"][0]


def test_summaries_keep_the_series_their_median_is_taken_from():
    from ccoverlap.bench.catalog import SIZES

    ranks = [{"rank": r, "sizes": [{"size_bytes": 4096, "count": 1024, "type": "float32", "time_ms": 0.1,
                                     "algbw_GBps": 1.0, "busbw_GBps": 1.0, "step_ms": statistics.median(s),
                                     "gemm_ms": 1.0, "exposed_comm_ms": 0.5, "wrong": 0, "samples": s}]}
             for r, s in ((0, [3.0, 1.0, 2.0]), (1, [1.0, 4.0, 1.5]))]
    (row,) = SIZES.summarize("micro", "default", ranks, {})
    assert row[SERIES] == [3.0, 4.0, 2.0] and row["step_ms"] == 3.0  # per step the slowest rank, then the median


def test_tables_are_readable_at_80_columns(capsys):
    """In a log or a pipe: no line past 80 characters, no word or number cut (no ellipsis), and the micro table's
    n/a reason in a column of its own, whole."""
    rows = _mixed()
    rows[1]["strategy"] = "nccl-threads+shape+priority"
    micro = [{"workload": "micro", "strategy": s, "status": "ok", "size_bytes": n, "busbw_GBps": 12.5, "step_ms": 3.25,
              "exposed_comm_ms": 0.5, "wrong": 0, SERIES: [3.2, 3.3, 3.25]} for s in ("default", "carveout-hint+priority")
             for n in (4096, 64 << 20)]
    micro.append({"workload": "micro", "strategy": "nccl-cta-policy", "status": "n/a: nccl-cta-policy: needs NCCL >= "
                  "2.27.3; this is 2.21.5"})
    rows += micro
    unmatched = launcher.against_default(rows)
    cli_bench._print(rows, launcher.compare(rows), unmatched)
    out = capsys.readouterr().out
    tables = out.split("micro: ")
    assert max(len(line) for t in tables for line in t.splitlines() if "│" in line or "┃" in line) <= 80
    assert "…" not in out
    header, *body = table_rows(tables[1])
    assert header[-1] == "status" and body[-1][-1] == "n/a: nccl-cta-policy: needs NCCL >= 2.27.3; this is 2.21.5"
    assert [r[1] for r in body[:2]] == ["4KiB", "64MiB"] and body[0][-1] == "ok"
