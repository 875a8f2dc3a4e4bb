"""The bench's workloads, one entry each, and the row types that report them.

A row type says everything that differs between kinds of results: how a rank measures what the
workload's builder made, how the ranks' results become rows (one per process set), how the rows of a
strategy's process sets become its row, how strategies are compared, and how the rows are printed and
plotted. `steps` reports a training step per strategy; `sizes` is
nccl-tests style, one row per message size. The launcher, the CLI and the plots read these
entries and never a workload's name. Importable without torch: the builders (bench/workloads.py)
are looked up when a rank builds, and the measuring gets its timer from the rank."""
from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ccoverlap.control.levers import DEFAULT
from ccoverlap.util.stats import CONFIDENCE, NOISE, Comparison, pooled_median
from ccoverlap.util.text import shorten

#: timed(fn, before=None, drain=True) -> ms per call (drain=False: nothing drained or aligned between calls);
#: trace(fn) records a few calls of fn (or does nothing)
Timer = Callable[..., list[float]]


def _fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


# -- every row type: its step series and how it compares with `default`'s ---------------------

#: one process set's per-step series (ms; per step the slowest rank): a row keeps one per process set in
#: `runs`, its step_ms is their pooled median, and `vs_default` compares them with default's runs: the table
#: and the comparison read the same numbers
SERIES = "step_samples_ms"
#: a row's process sets, in the order they ran: each one's series and what else it measured
RUNS = "runs"
#: what a process set's row shares with the others of its strategy: said once, in the merged row
SHARED = ("workload", "strategy", "levers", "status", "emulation")
VS_DEFAULT_COLUMN = f"vs {DEFAULT} ({CONFIDENCE:.0%} CI)"


def vs_default_note(repeats: int) -> str:
    """What the comparison column covers, for a run of `repeats` process sets per strategy."""
    if repeats < 2:
        covers = ("one process set per strategy, so it covers step-to-step noise only, not the noise between "
                  "processes (--repeats, 3 by default)")
    else:
        covers = (f"{repeats} fresh process sets per strategy, run interleaved, resampled first and then their steps, "
                  "so the noise between processes is in it")
    return (f"vs {DEFAULT}: median step / {DEFAULT}'s median step, {CONFIDENCE:.0%} bootstrap interval; "
            f"'within noise' where it holds 1. {covers[0].upper()}{covers[1:]}.")


def series(row: dict) -> list[list[float]]:
    """A row's step series, one per process set (what stats.compare takes)."""
    return [run[SERIES] for run in row[RUNS]]


def _slowest_rank(per_rank: Iterable[list[float]]) -> list[float]:
    """A step ends when its slowest rank ends: per step, the max over ranks."""
    return [max(vals) for vals in zip(*per_rank)]


def _vs_default_cell(r: dict) -> str:
    """`default` itself is the baseline; a row with nothing to compare with shows '-'."""
    if r["strategy"] == DEFAULT:
        return "baseline"
    if r.get("vs_default") is None:
        return "-"
    c = Comparison.from_dict(r["vs_default"])
    return c.label() if c.verdict != NOISE else f"~ {c.label()}"  # '~': no effect shown, whatever the ratio


# -- steps: one training step per strategy ---------------------------------------------------

def _measure_steps(w, timed: Timer, trace: Callable) -> dict:
    out = {"step_ms": timed(w.run_step, drain=not w.background), "losses": w.losses, "note": w.note,
           "counters": w.counters()}  # over the warm-up and timed steps
    trace(w.step)
    out["compute_only_ms"] = timed(w.compute_only) if w.compute_only else None
    return out


def _summarize_steps(workload: str, strategy: str, ranks: list[dict], stats: dict) -> list[dict]:
    """One process set's row: its step series (per step the slowest rank) and what else its ranks measured."""
    return [{
        "workload": workload, "strategy": strategy, "status": "ok",
        SERIES: _slowest_rank(r["step_ms"] for r in ranks),
        "samples": {f"rank{r['rank']}": r["step_ms"] for r in ranks},
        "compute_samples_ms": (_slowest_rank(r["compute_only_ms"] for r in ranks)
                               if ranks[0]["compute_only_ms"] else None),
        "exposed_comm_note": ranks[0]["note"] or None,
        # a workload's own counters (bench/workloads.RankSteps.counters): the worst rank's, as step times the slowest
        "counters": {k: max(r["counters"][k] for r in ranks) for k in ranks[0].get("counters", {})},
        "losses": ranks[0]["losses"], "interposer": stats or None,
        "wall_s": max(r["wall_s"] for r in ranks),  # build, warm-up, timing and trace of this workload
    }]


def _merge_steps(runs: list[dict]) -> dict:
    """A strategy's figures from its process sets' rows: medians pooled over every step of every set, a
    workload's counters the worst set's (as the worst rank's within one), the first set's losses."""
    steps = [x for r in runs for x in r[SERIES]]
    compute = [r["compute_samples_ms"] for r in runs if r["compute_samples_ms"]]
    step, comp = pooled_median([steps]), pooled_median(compute) if compute else None
    return {"step_ms": step, "step_ms_min": min(steps), "step_ms_max": max(steps), "compute_only_ms": comp,
            "exposed_comm_ms": max(step - comp, 0.0) if comp is not None else None,
            "exposed_comm_note": runs[0]["exposed_comm_note"],
            **{k: max(r["counters"][k] for r in runs) for k in runs[0]["counters"]},
            "losses": runs[0]["losses"], "wall_s": sum(r["wall_s"] for r in runs)}


def _same_losses(rows: list[dict], baseline: str) -> dict:
    base = next((r["losses"] for r in rows if r["strategy"] == baseline), rows[0]["losses"])
    worst = max((abs(a - b) / max(abs(b), 1e-12) for r in rows for a, b in zip(r["losses"], base)), default=0.0)
    bitwise = all(r["losses"] == base for r in rows)
    return {"match": bitwise or worst <= 1e-3,
            "how": "bitwise" if bitwise else f"max relative loss difference {worst:.2e} (tolerance 1e-3)"}


def _step_cells(r: dict) -> list:
    return [r["strategy"], f"{r['step_ms']:.2f} ({r['step_ms_min']:.2f}-{r['step_ms_max']:.2f})",
            _vs_default_cell(r), _fmt(r["compute_only_ms"]), _fmt(r["exposed_comm_ms"]), "ok"]


# -- sizes: nccl-tests style, one row per message size ----------------------------------------

def _measure_sizes(sweep: Iterable, timed: Timer, trace: Callable) -> dict:
    """Per size: the all-reduce beside the GEMMs (checked), then alone (time, algbw, busbw), then the GEMMs alone."""
    rows = []
    for m in sweep:
        overlapped = timed(m.overlapped, m.reset)
        wrong = m.wrong()
        t = statistics.median(timed(m.allreduce_alone, m.reset))
        gemm = statistics.median(timed(m.gemms))
        algbw = m.nbytes / (t * 1e-3) / 1e9
        rows.append({
            "size_bytes": m.nbytes, "count": m.nbytes // 4, "type": "float32", "time_ms": t,
            "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (m.world - 1) / m.world if m.world > 1 else 0.0,
            "gemm_ms": gemm, "wrong": wrong, "samples": overlapped,
        })
    return {"sizes": rows}


def _summarize_sizes(workload: str, strategy: str, ranks: list[dict], stats: dict) -> list[dict]:
    rows = []
    for i, first in enumerate(ranks[0]["sizes"]):
        per_rank = [r["sizes"][i] for r in ranks]
        keep = ("size_bytes", "count", "type", "time_ms", "algbw_GBps", "busbw_GBps", "gemm_ms")
        rows.append({"workload": workload, "strategy": strategy, "status": "ok", **{k: first[k] for k in keep},
                     "wrong": sum(r["wrong"] for r in per_rank), "interposer": stats or None,
                     "samples": {f"rank{r['rank']}": r["sizes"][i]["samples"] for r in ranks},
                     SERIES: _slowest_rank(r["samples"] for r in per_rank)})
    return rows


def _merge_sizes(runs: list[dict]) -> dict:
    """One size's row from its process sets' rows: the all-reduce and the GEMMs alone by the median over the sets
    (bandwidths from that time), the step beside the GEMMs pooled over every step, #wrong summed."""
    first = runs[0]
    t = statistics.median(r["time_ms"] for r in runs)
    step = pooled_median([r[SERIES] for r in runs])
    gemm = statistics.median(r["gemm_ms"] for r in runs)
    algbw = first["size_bytes"] / (t * 1e-3) / 1e9
    bus = first["busbw_GBps"] / first["algbw_GBps"] if first["algbw_GBps"] else 0.0  # 2(n-1)/n
    return {k: first[k] for k in ("size_bytes", "count", "type")} | {
        "time_ms": t, "algbw_GBps": algbw, "busbw_GBps": algbw * bus, "step_ms": step, "gemm_ms": gemm,
        "exposed_comm_ms": max(step - gemm, 0.0), "wrong": sum(r["wrong"] for r in runs)}


def _none_wrong(rows: list[dict], baseline: str) -> dict:
    return {"match": all(r["wrong"] == 0 for r in rows), "how": "all-reduce results vs the exact sum"}


def _bytes(n: int) -> str:
    """4096 -> '4KiB' (whole units where they are whole, as message sizes are; one word, so it never wraps)."""
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or n % 1024:
            return f"{n}{unit}"
        n //= 1024
    return f"{n}GiB"


def _size_cells(r: dict) -> list:
    return [r["strategy"], _bytes(r["size_bytes"]), _fmt(r["busbw_GBps"]), _fmt(r["step_ms"], ".3f"),
            _vs_default_cell(r), _fmt(r["exposed_comm_ms"], ".3f"), "ok" if not r["wrong"] else f"{r['wrong']} wrong"]


def _largest_size(rows: list[dict]) -> list[dict]:
    largest = max((r["size_bytes"] for r in rows), default=0)
    return [r for r in rows if r["size_bytes"] == largest]


@dataclass(frozen=True)
class RowType:
    measure: Callable[[object, Timer, Callable], dict]  # in a rank: what the builder made -> this rank's results
    summarize: Callable[[str, str, list[dict], dict], list[dict]]  # (workload, strategy, ranks' results, stats) -> rows
    merge: Callable[[list[dict]], dict]  # one strategy's ok rows (of one key), a process set each -> its row's figures
    verdict: Callable[[list[dict], str], dict]  # (ok rows of every strategy and process set, baseline) -> outputs_match
    paired_by: tuple[str, ...]  # the fields a row shares with the baseline's row it is timed against (SERIES)
    columns: tuple[str, ...]  # the printed table
    cells: Callable[[dict], list]  # an ok row's cells
    status_column: int  # where a row that did not run says why
    plotted: Callable[[list[dict]], list[dict]]  # the ok rows drawn, one bar per strategy
    plot_title: str  # formatted with the workload's name

    def table_row(self, row: dict) -> list:
        if row["status"] == "ok":
            return self.cells(row)
        cells = [row["strategy"]] + [""] * (len(self.columns) - 1)
        cells[self.status_column] = shorten(row["status"], 120)
        return cells


STEPS = RowType(_measure_steps, _summarize_steps, _merge_steps, _same_losses, (),
                ("strategy", "step ms (min-max)", VS_DEFAULT_COLUMN, "compute alone ms", "exposed comm ms", "status"),
                _step_cells, 5, lambda rows: rows, "{name}")
#: the terminal's columns (80 wide; status: ok, the results that were wrong, or why the row did not run); the
#: JSON rows have nccl-tests' others too: bytes, count, type, time and algbw alone, #wrong
SIZES = RowType(_measure_sizes, _summarize_sizes, _merge_sizes, _none_wrong, ("size_bytes",),
                ("strategy", "size", "busbw (GB/s)", "with GEMMs (ms)", VS_DEFAULT_COLUMN, "exposed (ms)", "status"),
                _size_cells, 6, _largest_size, "{name} (largest size)")


@dataclass(frozen=True)
class Workload:
    name: str  # also the name of its builder in bench/workloads.py
    rows: RowType
    traced: bool  # --trace records its training step
    description: str



WORKLOADS: tuple[Workload, ...] = (
    Workload("micro", SIZES, False, "GEMM chain beside an all-reduce, nccl-tests style rows"),
    Workload("ddp", STEPS, True, "GPT-style decoder, DistributedDataParallel"),
    Workload("fsdp", STEPS, True, "FSDP2 fully_shard"),
    Workload("tp", STEPS, True, "tensor-parallel attention and MLP, the global batch shared by the ranks"),
    Workload("moe", STEPS, True, "top-1 experts with all-to-all dispatch and combine"),
    Workload("diloco", STEPS, True,
             "streaming DiLoCo: model fragments all-reduced in the background while local inner steps run"),
)
BY_NAME = {w.name: w for w in WORKLOADS}
