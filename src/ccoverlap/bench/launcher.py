"""Run each strategy in fresh ranks (env-level controls need that), gather their results and
check that every strategy computed what the baseline computed."""
from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ccoverlap.bench.config import BenchConfig
from ccoverlap.bench.strategies import BY_NAME, MULTICAST_OFF, BenchStrategy
from ccoverlap.bench.worker import spec_for
from ccoverlap.errors import UsageError

RANK_TIMEOUT_S = 1800


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: the emulation's proxy kernel is communication to the interposer, as NCCL's kernels are
EMULATED_COMM_KERNELS = "^comm_paced$"


def strategy_env(strategy: BenchStrategy, stats_dir: str, emulated: bool = False) -> dict[str, str]:
    env = dict(MULTICAST_OFF) | strategy.env
    if strategy.shape:
        from ccoverlap.interposer import Policy, preload_env

        env |= Policy(mode="auto", stats=os.path.join(stats_dir, "interposer-%p.json"),
                      comm=EMULATED_COMM_KERNELS if emulated else None).to_environ()
        env |= preload_env(os.environ)  # keeps the user's own LD_PRELOAD
    return env


def not_applicable(cfg: BenchConfig, strategy: BenchStrategy) -> str | None:
    if strategy.cuda_only and cfg.device != "cuda":
        return "n/a: needs CUDA and NCCL"
    return None


def run_ranks(cfg: BenchConfig, strategy: BenchStrategy, launcher: str = "spawn") -> tuple[list[dict], dict]:
    """Start cfg.nproc ranks that run every workload under one strategy; (per-rank results,
    interposer stats) or raise RuntimeError."""
    with tempfile.TemporaryDirectory(prefix="ccoverlap-bench-") as tmp:
        spec_path = Path(tmp, "spec.json")
        spec_path.write_text(json.dumps(spec_for(cfg, strategy.name, tmp)))
        port = str(_free_port())
        env = os.environ | strategy_env(strategy, tmp, cfg.comm == "emulate") | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                                                          "WORLD_SIZE": str(cfg.nproc), "OMP_NUM_THREADS": "1"}
        module = [sys.executable, "-m", "ccoverlap.bench.worker", str(spec_path)]
        if launcher == "torchrun":
            runner = shutil.which("torchrun")
            if runner is None:
                raise UsageError("--launcher torchrun: torchrun is not on PATH (install torch, or use --launcher spawn)")
            cmds = [([runner, f"--nproc-per-node={cfg.nproc}", f"--master-port={port}", *module[1:]], env)]
        else:
            cmds = [(module, env | {"RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(cfg.nproc)]
        logs = [Path(tmp, f"stderr{i}.log") for i in range(len(cmds))]
        procs = [subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL, stderr=log.open("w"))
                 for (cmd, e), log in zip(cmds, logs)]
        if failed := wait_all(procs, RANK_TIMEOUT_S):
            lines = [ln for ln in logs[failed[0]].read_text(errors="replace").splitlines() if ln.strip()]
            raise RuntimeError(lines[-1] if lines else f"exit code {failed[1]}")
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(cfg.nproc)]
        stats = [json.loads(f.read_text()) for f in Path(tmp).glob("interposer-*.json")]
        return ranks, _merge_stats(stats)


def wait_all(procs: list[subprocess.Popen], timeout_s: float) -> tuple[int, int] | None:
    """Wait for every rank; at the first failure (or the timeout) kill the others, which would
    otherwise wait forever in a collective. Returns (index, exit code) of the failure, or None."""
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        failed = next(((i, c) for i, c in enumerate(codes) if c not in (None, 0)), None)
        if failed is None and time.monotonic() > deadline:
            failed = next(i for i, c in enumerate(codes) if c is None), "timeout"
        if failed is not None or all(c == 0 for c in codes):
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
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


def _median(xs):
    return statistics.median(xs) if xs else None


def summarize(workload: str, strategy: str, ranks: list[dict], stats: dict) -> list[dict]:
    """Rows for one (workload, strategy): nccl-tests style per size for micro, one per step otherwise.
    `ranks` holds each rank's results for this workload."""
    if error := next((r["error"] for r in ranks if "error" in r), None):
        return [{"workload": workload, "strategy": strategy, "status": f"failed: {error}"}]
    if workload == "micro":
        rows = []
        for i, first in enumerate(ranks[0]["micro_rows"]):
            per_rank = [r["micro_rows"][i] for r in ranks]
            rows.append({**{k: v for k, v in first.items() if k != "samples"}, "workload": workload, "strategy": strategy,
                         "status": "ok", "wrong": sum(r["wrong"] for r in per_rank),
                         "step_ms": max(r["step_ms"] for r in per_rank),
                         "samples": {f"rank{r['rank']}": r["micro_rows"][i]["samples"] for r in ranks}})
        return rows
    # a step ends when its slowest rank ends: per step, take the max over ranks
    steps = [max(vals) for vals in zip(*(r["step_ms"] for r in ranks))]
    compute = [max(vals) for vals in zip(*(r["compute_only_ms"] for r in ranks))] if ranks[0]["compute_only_ms"] else None
    step, comp = _median(steps), _median(compute)
    return [{
        "workload": workload, "strategy": strategy, "status": "ok",
        "step_ms": step, "step_ms_min": min(steps), "step_ms_max": max(steps),
        "compute_only_ms": comp, "exposed_comm_ms": max(step - comp, 0.0) if comp is not None else None,
        "exposed_comm_note": ranks[0]["note"] or None,
        "losses": ranks[0]["losses"], "interposer": stats or None,
        "samples": {f"rank{r['rank']}": r["step_ms"] for r in ranks},
        "wall_s": max(r["wall_s"] for r in ranks),  # build, warm-up, timing and trace of this workload
    }]


def compare(rows: list[dict], baseline: str = "default") -> dict:
    """outputs_match per workload: every strategy's losses against the baseline's (micro: #wrong == 0)."""
    verdict = {}
    for workload in sorted({r["workload"] for r in rows}):
        mine = [r for r in rows if r["workload"] == workload and r["status"] == "ok"]
        if not mine:
            verdict[workload] = {"match": False, "how": "no strategy ran"}
            continue
        if workload == "micro":
            verdict[workload] = {"match": all(r["wrong"] == 0 for r in mine), "how": "all-reduce results vs the exact sum"}
            continue
        base = next((r["losses"] for r in mine if r["strategy"] == baseline), mine[0]["losses"])
        worst = max((abs(a - b) / max(abs(b), 1e-12) for r in mine for a, b in zip(r["losses"], base)), default=0.0)
        bitwise = all(r["losses"] == base for r in mine)
        verdict[workload] = {"match": bitwise or worst <= 1e-3, "how": "bitwise" if bitwise else f"max relative loss difference {worst:.2e} (tolerance 1e-3)"}
    return verdict


def run_iter(cfg: BenchConfig, launcher: str = "spawn") -> Iterator[tuple[str, list[dict]]]:
    """Per strategy, in order: its name and its rows for every workload, as soon as its ranks
    finish. One set of fresh ranks per strategy runs all the workloads (start-up is paid once)."""
    for name in cfg.strategies:
        strategy = BY_NAME[name]
        if reason := not_applicable(cfg, strategy):
            yield name, [{"workload": w, "strategy": name, "status": reason} for w in cfg.workloads]
            continue
        try:
            ranks, stats = run_ranks(cfg, strategy, launcher)
        except RuntimeError as exc:
            yield name, [{"workload": w, "strategy": name, "status": f"failed: {exc}"} for w in cfg.workloads]
            continue
        rows = [row for w in cfg.workloads
                for row in summarize(w, name, [r["results"][w] | {"rank": r["rank"]} for r in ranks], stats)]
        if "emulation" in ranks[0]:
            for row in rows:
                row["emulation"] = ranks[0]["emulation"]
        yield name, rows


def run(cfg: BenchConfig, launcher: str = "spawn") -> list[dict]:
    return [row for _, rows in run_iter(cfg, launcher) for row in rows]
