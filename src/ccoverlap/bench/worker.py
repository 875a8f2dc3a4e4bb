"""One rank of one strategy: `python -m ccoverlap.bench.worker SPEC.json` (started by the launcher
or torchrun). Fixed warm-up and step counts on every rank, so ranks never wait on each other."""
from __future__ import annotations

import dataclasses
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ccoverlap import timing
from ccoverlap.bench import workloads
from ccoverlap.bench.config import BenchConfig, ModelSize
from ccoverlap.bench.strategies import BY_NAME


def _timed(fn, device: torch.device, reps: int, warmup: int, before=None) -> list[float]:
    """Milliseconds per call (ccoverlap.timing: CUDA events on GPU, a host clock on CPU); ranks aligned by a barrier."""
    return timing.timed(fn, reps, warmup, cuda=device.type == "cuda", before=before, align=dist.barrier)


def _trace(fn, path: Path, device: torch.device) -> None:
    """torch.profiler over 4 steps (1 warm-up, 3 recorded) into `path` (.json.gz) for `ccoverlap analyze`."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    path.parent.mkdir(parents=True, exist_ok=True)
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(4):
            fn()
            prof.step()


def _micro(cfg: BenchConfig, rank: int, world: int, device, no_overlap: bool) -> list[dict]:
    rows = []
    for nbytes in cfg.micro_sizes:
        m = workloads.Micro.build(cfg, nbytes, rank, world, device, no_overlap, emulated=cfg.comm == "emulate")
        base = m.tensor.clone()

        def reset():
            m.tensor.copy_(base)

        overlapped = _timed(m.overlapped, device, cfg.steps, cfg.warmup, reset)
        wrong = m.wrong()
        alone = _timed(m.allreduce_alone, device, cfg.steps, cfg.warmup, reset)
        gemm = _timed(m.gemms, device, cfg.steps, cfg.warmup)
        t = statistics.median(alone)
        algbw = nbytes / (t * 1e-3) / 1e9
        rows.append({
            "size_bytes": nbytes, "count": nbytes // 4, "type": "float32", "time_ms": t,
            "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (world - 1) / world if world > 1 else 0.0,
            "step_ms": statistics.median(overlapped), "gemm_ms": statistics.median(gemm),
            "exposed_comm_ms": max(statistics.median(overlapped) - statistics.median(gemm), 0.0),
            "wrong": wrong, "samples": overlapped,
        })
    return rows


def _init(cfg: BenchConfig) -> tuple[torch.device, int, int]:
    """Join the job: (device, rank, world size as the workloads see it)."""
    if cfg.comm == "emulate":
        from ccoverlap.bench import emulate

        emulation = emulate.Emulation.from_env(cfg.emulate_world, cfg.busbw_gbps)
        if cfg.device == "cuda":
            from ccoverlap.bench.proxy import ProxyMover

            device = torch.device("cuda", 0)
            torch.cuda.set_device(device)
            emulate.init(ProxyMover(emulation, device))
        else:
            device = torch.device("cpu")
            emulate.init(emulate.CpuMover(emulation))
        return device, 0, cfg.emulate_world
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if cfg.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return device, rank, world


def _workload(cfg: BenchConfig, name: str, strategy: str, no_overlap: bool, rank: int, world: int, device) -> dict:
    if name == "micro":
        return {"micro_rows": _micro(cfg, rank, world, device, no_overlap)}
    w = workloads.BUILDERS[name](cfg, rank, world, device, no_overlap)
    out = {"step_ms": _timed(w.run_step, device, cfg.steps, cfg.warmup), "losses": w.losses, "note": w.note}
    if cfg.trace_dir:
        _trace(w.step, Path(cfg.trace_dir) / name / strategy / f"rank{rank}_trace.json.gz", device)
    out["compute_only_ms"] = _timed(w.compute_only, device, cfg.steps, cfg.warmup) if w.compute_only else None
    return out


def run(spec: dict) -> dict:
    """Every workload of the spec under one strategy, in this process; a workload that raises is
    reported as failed and the next one runs."""
    size = ModelSize(**spec["config"].pop("size"))
    cfg = BenchConfig(**{**spec["config"], "size": size, "workloads": tuple(spec["config"]["workloads"]),
                         "strategies": tuple(spec["config"]["strategies"]), "micro_sizes": tuple(spec["config"]["micro_sizes"])})
    strategy = BY_NAME[spec["strategy"]]
    device, rank, world = _init(cfg)
    if strategy.carveout:
        torch._C._set_sm_carveout_experimental(spec["carveout_sms"])
    out = {"rank": rank, "world_size": world, "strategy": strategy.name, "backend": cfg.backend, "results": {}}
    for name in cfg.workloads:
        started = time.perf_counter()
        try:
            out["results"][name] = _workload(cfg, name, strategy.name, strategy.no_overlap, rank, world, device)
        except Exception as exc:  # noqa: BLE001 - reported in the results, the next workload runs
            out["results"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        out["results"][name]["wall_s"] = time.perf_counter() - started  # for budgeting device calls
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if cfg.comm == "emulate":
        from ccoverlap.bench import emulate

        out["emulation"] = emulate.describe()
    dist.barrier()
    return out


def main(argv: list[str]) -> None:
    spec = json.loads(Path(argv[0]).read_text())
    result = run(spec)
    Path(spec["out_dir"], f"rank{result['rank']}.json").write_text(json.dumps(result))
    if result["backend"] == "gloo":
        # gloo's threads can abort the interpreter's exit ("terminate called without an
        # active exception") after the work is done and written: leave at once.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    dist.destroy_process_group()  # a normal exit: the interposer writes its stats then


def spec_for(cfg: BenchConfig, strategy: str, out_dir: str, carveout_sms: int = 16) -> dict:
    return {"config": dataclasses.asdict(cfg), "strategy": strategy, "out_dir": out_dir, "carveout_sms": carveout_sms}


if __name__ == "__main__":
    main(sys.argv[1:])
