"""Run each strategy in fresh ranks (env-level controls need that), several process sets each, interleaved;
gather their results, merge each strategy's process sets into its rows, check that every strategy computed
what the baseline computed, and time every row against the baseline's."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ccoverlap.bench import schedule
from ccoverlap.bench.catalog import BY_NAME as BY_WORKLOAD
from ccoverlap.bench.catalog import RUNS, SHARED, series
from ccoverlap.bench.config import BenchConfig, strategy_of
from ccoverlap.bench.schedule import ProcessSet
from ccoverlap.bench.worker import spec_for
from ccoverlap.control import levers
from ccoverlap.control.launch import Launch
from ccoverlap.control.procs import GRACE_S, Child, Stopped, stop, stop_on_signals, why_failed  # noqa: F401 - the bench CLI reads them here
from ccoverlap.util import stats
from ccoverlap.util.errors import UsageError
from ccoverlap.util.output import Progress

RANK_TIMEOUT_S = 1800


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_launch(strategy: levers.Strategy, stats_dir: str) -> Launch:
    """How a strategy's ranks start: what its levers set (a whole policy: the caller's CCOVERLAP_* variables
    do not change a row), the interposer's stats into `stats_dir` where it runs, its start-up calls through
    the hook, as every tool's launch gives them."""
    setting = strategy.setting()
    return Launch(setting, {"stats": os.path.join(stats_dir, "interposer-%p.json")} if setting.policy else {})


def host(cfg: BenchConfig) -> levers.Host:
    """The machine the ranks run on, as the levers see it: a CPU under --device cpu, whatever is installed."""
    return levers.Host.detect() if cfg.device == "cuda" else levers.Host("cpu")


def not_applicable(cfg: BenchConfig, strategy: levers.Strategy, where: levers.Host) -> str | None:
    """`n/a: lever: reason` for a strategy with a lever that does not apply on `where` in a fresh process,
    or that the communication backend cannot honour; None when it runs."""
    reason = strategy.not_applicable(where, "process") or cfg.comm_backend.not_applicable(strategy)
    return f"n/a: {reason}" if reason else None


def run_ranks(cfg: BenchConfig, strategy: levers.Strategy, launcher: str = "spawn", label: str | None = None,
              progress: str | None = None) -> tuple[list[dict], dict]:
    """Start cfg.nproc ranks that run every workload under one strategy; (per-rank results,
    interposer stats) or raise RuntimeError. Whatever ends this early (a signal, an error) stops
    the ranks first; the temporary folder goes with them. `label`, `progress`: as worker.spec_for takes them."""
    with tempfile.TemporaryDirectory(prefix="ccoverlap-bench-", ignore_cleanup_errors=True) as tmp:
        try:
            return _run_ranks(cfg, strategy, launcher, tmp, label, progress)
        except OSError as exc:  # the folder went away or filled up under the ranks: a failed row, not a traceback
            raise RuntimeError(f"the bench's temporary folder {tmp}: {exc.strerror or exc}") from None


def _run_ranks(cfg: BenchConfig, strategy: levers.Strategy, launcher: str, tmp: str, label: str | None,
               progress: str | None) -> tuple[list[dict], dict]:
    spec_path = Path(tmp, "spec.json")
    spec_path.write_text(json.dumps(spec_for(cfg, strategy.name, tmp, label, progress)))
    port = str(_free_port())
    base = os.environ | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": str(cfg.nproc),
                         "OMP_NUM_THREADS": "1"}
    module = [sys.executable, "-m", "ccoverlap.bench.worker", str(spec_path)]
    if launcher == "torchrun":
        cmds = [([torchrun(), f"--nproc-per-node={cfg.nproc}", f"--master-port={port}", *module[1:]], base)]
    else:
        cmds = [(module, base | {"RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(cfg.nproc)]
    how = rank_launch(strategy, tmp)
    logs = [Path(tmp, f"stderr{i}.log") for i in range(len(cmds))]
    ranks: list[Child] = []
    try:
        for (cmd, env), log in zip(cmds, logs):
            with log.open("w") as err:
                ranks.append(how.start(cmd, env, stdout=subprocess.DEVNULL, stderr=err))
        failed = wait_all(ranks, RANK_TIMEOUT_S)
    except BaseException as exc:
        stop(ranks, exc.signum if isinstance(exc, Stopped)
             else signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGKILL)
        raise
    if failed:
        why = why_failed(logs[failed[0]].read_text(errors="replace"), 1)
        raise RuntimeError(why or f"exit code {failed[1]}")
    results = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(cfg.nproc)]
    stats = [json.loads(f.read_text()) for f in Path(tmp).glob("interposer-*.json")]
    return results, _merge_stats(stats)


def torchrun() -> str:
    """torchrun's path, or the one line saying it is missing (checked before the first rank starts too)."""
    if (runner := shutil.which("torchrun")) is None:
        raise UsageError("--launcher torchrun: torchrun is not on PATH (install torch, or use --launcher spawn)")
    return runner


def wait_all(procs: list[Child], timeout_s: float) -> tuple[int, int] | None:
    """Wait for every rank; at the first failure (or the timeout) kill the others, which would
    otherwise wait forever in a collective. Returns (index, exit code) of the failure, or None."""
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        failed = next(((i, c) for i, c in enumerate(codes) if c not in (None, 0)), None)
        if failed is None and time.monotonic() > deadline:
            failed = next(i for i, c in enumerate(codes) if c is None), "timeout"
        if failed is not None or all(c == 0 for c in codes):
            stop(procs, signal.SIGKILL)
            return failed
        time.sleep(0.05)


def _merge_stats(stats: list[dict]) -> dict:
    if not stats:
        return {}
    merged = {k: sum(s.get(k, 0) for s in stats) for k in ("launches", "padded")}
    merged["processes"] = len(stats)
    merged["skipped"] = {}
    for s in stats:
        for reason, n in s.get("skipped", {}).items():
            merged["skipped"][reason] = merged["skipped"].get(reason, 0) + n
    # the NCCL kernel footprint the interposer observed at launch (auto mode learns it)
    merged["comm_footprint"] = next((s["comm_footprint"] for s in stats if s.get("comm_footprint")), None)
    return merged


def summarize(workload: str, strategy: str, ranks: list[dict], stats: dict) -> list[dict]:
    """Rows for one (workload, strategy) of one process set, as its row type makes them (bench/catalog.py).
    `ranks` holds each rank's results for this workload."""
    if error := next((r["error"] for r in ranks if "error" in r), None):
        return [{"workload": workload, "strategy": strategy, "status": f"failed: {error}"}]
    return BY_WORKLOAD[workload].rows.summarize(workload, strategy, ranks, stats)


def aggregate(rows: list[dict]) -> list[dict]:
    """Each strategy's rows from its process sets' rows (`repeat` 1..N), per workload in the order first seen:
    its row type's figures over every set, the sets themselves under `runs` (what each measured, in the order
    run). A strategy with a set that failed on a workload has one row for it: failed, naming the set."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["workload"], r["strategy"]), []).append(r)
    out = []
    for (workload, _), mine in groups.items():
        kind = BY_WORKLOAD[workload].rows
        if failed := next((r for r in mine if r["status"] != "ok"), None):
            repeats = max(r.get("repeat", 1) for r in mine)
            out.append({k: failed[k] for k in SHARED if k in failed}
                       | {"status": f"failed: repeat {failed.get('repeat', 1)}/{repeats}: "
                                    f"{failed['status'].removeprefix('failed: ')}"})
            continue
        by_key: dict[tuple, list[dict]] = {}
        for r in mine:
            by_key.setdefault(tuple(r[k] for k in kind.paired_by), []).append(r)
        for runs in by_key.values():
            out.append({k: runs[0][k] for k in SHARED if k in runs[0]} | kind.merge(runs)
                       | {RUNS: [{k: v for k, v in r.items() if k not in SHARED} for r in runs]})
    return out


def compare(rows: list[dict], baseline: str = "default") -> dict:
    """outputs_match per workload: every strategy's results against the baseline's, as its row type compares them
    (`rows`: one per process set, so the sets of one strategy are held to each other too)."""
    verdict = {}
    for workload in sorted({r["workload"] for r in rows}):
        mine = [r for r in rows if r["workload"] == workload and r["status"] == "ok"]
        verdict[workload] = (BY_WORKLOAD[workload].rows.verdict(mine, baseline) if mine
                             else {"match": False, "how": "no strategy ran"})
    return verdict


NO_DEFAULT = f"no {levers.DEFAULT} to compare with"
ONE_STEP = "one timed step: no interval"


def against_default(rows: list[dict], baseline: str = levers.DEFAULT) -> dict[str, str | None]:
    """Mark every ok row but the baseline's (merged rows: aggregate's) with `vs_default`: stats.compare of the
    baseline's row of the same workload (and whatever else its row type pairs rows by: micro's size) with it,
    by their step series, a run per process set, plus `processes`: how many sets the row ran in; None where
    there is nothing to compare with. Returns, per workload, why its rows have no comparison (None: they have
    one), for the table's title."""
    why = {}
    for workload in dict.fromkeys(r["workload"] for r in rows):
        ok = [r for r in rows if r["workload"] == workload and r["status"] == "ok"]
        key = BY_WORKLOAD[workload].rows.paired_by
        base = {tuple(r[k] for k in key): series(r) for r in ok if r["strategy"] == baseline}
        why[workload] = NO_DEFAULT if not base else ONE_STEP if any(_steps(s) < 2 for s in base.values()) else None
        for r in ok:
            if r["strategy"] != baseline:
                runs, mine = base.get(tuple(r[k] for k in key)), series(r)
                usable = runs is not None and _steps(runs) > 1 and _steps(mine) > 1  # one step: a zero-width interval
                r["vs_default"] = stats.compare(runs, mine).to_dict() | {"processes": len(mine)} if usable else None
    return why


def _steps(runs: list[list[float]]) -> int:
    return sum(map(len, runs))


def best(rows: list[dict]) -> dict[str, str]:
    """Per workload, one line: the fastest row faster than the baseline beyond the noise (its interval), or
    that there is none; for the merged rows against_default has marked."""
    lines = {}
    for workload in dict.fromkeys(r["workload"] for r in rows):
        key = BY_WORKLOAD[workload].rows.paired_by
        compared = [r for r in rows if r["workload"] == workload and r.get("vs_default")]
        faster = [r for r in compared if r["vs_default"]["verdict"] == stats.FASTER]
        if not compared:
            lines[workload] = f"{workload}: nothing compared with {levers.DEFAULT}"
            continue
        sets = sorted({n for r in compared for n in r["vs_default"]["runs"]})  # a run cut short: fewer for some
        noise = (f"the noise of {sets[0] if len(sets) == 1 else f'{sets[0]}-{sets[-1]}'} process "
                 f"set{'s' * (sets != [1])} per strategy")
        if not faster:
            lines[workload] = f"{workload}: nothing beyond {noise}"
        else:
            top = min(faster, key=lambda r: r["vs_default"]["ratio"])
            name = " ".join([top["strategy"], *(f"{k}={top[k]}" for k in key)])
            lines[workload] = (f"{workload}: best beyond {noise}: {name} "
                               f"{stats.Comparison.from_dict(top['vs_default']).label()}")
    return lines


def plan(cfg: BenchConfig, where: levers.Host | None = None) -> tuple[list[ProcessSet], list[dict]]:
    """The process sets to run, interleaved, and the strategies that do not apply here (each with its reason:
    listed once, not run)."""
    where = where or host(cfg)
    runnable, skipped = [], []
    for label in cfg.strategies:
        strategy = levers.strategy(strategy_of(label))
        if reason := not_applicable(cfg, strategy, where):
            skipped.append({"strategy": label, "levers": strategy.values, "reason": reason.removeprefix("n/a: ")})
        else:
            runnable.append((label, strategy))
    return schedule.interleaved(runnable, cfg.repeats), skipped


def run_iter(cfg: BenchConfig, launcher: str = "spawn", sets: list[ProcessSet] | None = None,
             progress: Progress | None = None) -> Iterator[tuple[ProcessSet, list[dict], float]]:
    """Per process set, in order (plan's): its rows for every workload as soon as its ranks finish, and its wall
    time. One process set runs all the workloads (start-up is paid once); only the first set of each strategy
    writes --trace. Every row names the strategy and its levers (lever -> value), the set's repeat and place.
    `progress` counts the sets and names the one running and its rank 0's workload."""
    sets = plan(cfg)[0] if sets is None else sets
    told = Path(tempfile.gettempdir(), f"ccoverlap-bench-progress-{os.getpid()}")
    running = progress.running if progress else lambda _label: None
    for ps in sets:
        tag = {"strategy": ps.label, "levers": ps.strategy.values, "repeat": ps.repeat, "order": ps.index}
        title = ps.title(len(sets), cfg.repeats)
        started = time.monotonic()
        mine = cfg if ps.repeat == 1 else dataclasses.replace(cfg, trace_dir=None)
        running(f"{title}: starting ranks")
        try:
            with schedule.watch(told, lambda workload, title=title: running(f"{title}: {workload}")):
                ranks, interposed = run_ranks(mine, ps.strategy, launcher, ps.label, str(told))
        except RuntimeError as exc:
            rows = [{"workload": w, **tag, "status": f"failed: {exc}"} for w in cfg.workloads]
        else:
            rows = [{"workload": w, **tag} | row for w in cfg.workloads
                    for row in summarize(w, ps.label, [r["results"][w] | {"rank": r["rank"]} for r in ranks],
                                         interposed)]
            if "emulation" in ranks[0]:
                for row in rows:
                    row["emulation"] = ranks[0]["emulation"]
        if progress:
            progress.advance(title)
        yield ps, rows, time.monotonic() - started


def run(cfg: BenchConfig, launcher: str = "spawn", where: levers.Host | None = None) -> list[dict]:
    """Every process set of the run, its rows merged per strategy (aggregate's)."""
    return aggregate([row for _, rows, _ in run_iter(cfg, launcher, plan(cfg, where)[0]) for row in rows])
