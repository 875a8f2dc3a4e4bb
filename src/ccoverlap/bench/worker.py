"""One rank of one strategy: `python -m ccoverlap.bench.worker SPEC.json` (started by the launcher
or torchrun, under the strategy's launch: its variables, interposer and start-up calls, made by the hook as
this module imports torch). Fixed warm-up and step counts on every rank, so ranks never wait on each other."""
from __future__ import annotations

import dataclasses
import gc
import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ccoverlap.control import levers, startup
from ccoverlap.util import profiling, timing
from ccoverlap.bench import catalog, workloads
from ccoverlap.bench.comms import COMMS
from ccoverlap.bench.config import BenchConfig, ModelSize


def _timed(fn, device: torch.device, reps: int, warmup: int, before=None, drain: bool = True) -> list[float]:
    """Milliseconds per call (ccoverlap.util.timing: CUDA events on GPU, a host clock on CPU); ranks aligned by a
    barrier, unless not `drain` (a barrier would wait for the collectives left in flight: gloo's and NCCL's queue
    them)."""
    return timing.timed(fn, reps, warmup, cuda=device.type == "cuda", before=before,
                        align=dist.barrier if drain else None, drain=drain)


def _trace(fn, path: Path, device: torch.device) -> None:
    """4 steps (1 warm-up, 3 recorded) into `path` (.json.gz) for `ccoverlap analyze`."""
    profiling.record(fn, path, cuda=device.type == "cuda")


def _workload(cfg: BenchConfig, name: str, label: str, no_overlap: bool, rank: int, world: int, device) -> dict:
    w = catalog.BY_NAME[name]
    trace = Path(cfg.trace_dir) / name / label / f"rank{rank}_trace.json.gz" if cfg.trace_dir and w.traced else None
    return w.rows.measure(workloads.build(name, cfg, rank, world, device, no_overlap),
                          lambda fn, before=None, drain=True: _timed(fn, device, cfg.steps, cfg.warmup, before, drain),
                          (lambda fn: _trace(fn, trace, device)) if trace else (lambda fn: None))


def run(spec: dict) -> dict:
    """Every workload of the spec under one strategy, in this process; a workload that raises is
    reported as failed and the next one runs."""
    config = spec["config"]
    cfg = BenchConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
                      | {"size": ModelSize(**config["size"])})
    strategy = levers.strategy(spec["strategy"])
    if strategy.setting().startup and (why := startup.failed(startup.STARTUP_ENV)):
        raise RuntimeError(f"{strategy.name}: its start-up calls were not made ({why})")  # no row without its lever
    device, rank, world = cfg.comm_backend.init(cfg)
    out = {"rank": rank, "world_size": world, "strategy": strategy.name, "backend": cfg.backend, "results": {}}
    for name in cfg.workloads:
        if rank == 0 and spec.get("progress"):
            _say(spec["progress"], name)
        started = time.perf_counter()
        try:
            out["results"][name] = _workload(cfg, name, spec.get("label") or strategy.name, strategy.no_overlap,
                                             rank, world, device)
        except Exception as exc:  # noqa: BLE001 - reported in the results, the next workload runs
            out["results"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        out["results"][name]["wall_s"] = time.perf_counter() - started  # for budgeting device calls
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if (described := cfg.comm_backend.describe()) is not None:
        out["emulation"] = described
    dist.barrier()
    return out


def _say(path: str, workload: str) -> None:
    """Tell the launcher which workload runs now (for its progress line): whole or not at all."""
    tmp = f"{path}.{os.getpid()}"
    Path(tmp).write_text(workload)
    os.replace(tmp, path)


def main(argv: list[str]) -> None:
    # SIGINT ends this rank at once: a rank waiting in a collective never gets back to Python to raise
    # KeyboardInterrupt (its keeper ends it with the bench, however the bench ends: control/procs.py)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    spec = json.loads(Path(argv[0]).read_text())
    result = run(spec)
    Path(spec["out_dir"], f"rank{result['rank']}.json").write_text(json.dumps(result))
    if COMMS[spec["config"]["comm"]].hard_exit:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    dist.destroy_process_group()  # a normal exit: the interposer writes its stats then


def spec_for(cfg: BenchConfig, strategy: str, out_dir: str, label: str | None = None,
             progress: str | None = None) -> dict:
    """What a rank reads: the config, the strategy (by name: the rank checks that the hook made its start-up
    calls), where to write; the rows' name for it (default#2: traces go under it) and the file that names the
    workload running now."""
    return {"config": dataclasses.asdict(cfg), "strategy": strategy, "out_dir": out_dir, "label": label,
            "progress": progress}


if __name__ == "__main__":
    main(sys.argv[1:])
