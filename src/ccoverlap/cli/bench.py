"""`ccoverlap bench`: distributed training steps under every strategy; step time, exposed communication."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ccoverlap.errors import UsageError

from ._output import comma_list, print_table, print_text, write_json

EPILOG = """\
workloads: micro (GEMM chain beside an all-reduce, nccl-tests style rows), ddp (GPT-style decoder,
DistributedDataParallel), fsdp (FSDP2 fully_shard), tp (tensor-parallel attention and MLP), moe
(top-1 experts with all-to-all dispatch and combine).
strategies: no-overlap, default, priority, shape, priority+shape, carveout, nccl-ctas,
max-connections-1. Each runs in fresh ranks (all workloads in them) with the same seeds; losses
are compared with `default` (outputs_match). CUDA-only strategies are listed as n/a on the CPU.

communication (--comm): nccl with two or more GPUs; gloo on the CPU; emulate with one GPU: one
process stands in for rank 0 of --emulate-world ranks and every collective is a proxy kernel with
NCCL's CTA footprint, moving a ring's bytes paced to --busbw. That is an EMULATION (docs/bench.md).

examples:
  ccoverlap bench                                  what is here: all GPUs with NCCL, one GPU emulated, or 2 CPU ranks with gloo
  ccoverlap bench --comm emulate --emulate-world 8 --busbw 280 --workload ddp,fsdp
  ccoverlap bench --workload ddp,moe --device cpu --nproc 2 --steps 3 --tiny --json out.json
  ccoverlap bench --workload ddp --strategies no-overlap,default,priority --trace traces/
  ccoverlap analyze traces/ddp --baseline traces/ddp/no-overlap --report ddp.html
"""


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="distributed workloads (micro, ddp, fsdp, tp, moe) under every strategy: step time, exposed comm",
        description="Run real torch.distributed workloads under each overlap strategy, each in fresh ranks, and "
        "report step time and exposed communication per strategy, checking that every strategy computes the same.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workload", type=comma_list, default=("all",), help="comma-separated, or all (default)")
    p.add_argument("--strategies", type=comma_list, default=None, help="subset of the strategies (default: all)")
    p.add_argument("--device", default="auto", help="cpu or cuda, or auto (default: cuda if GPUs are visible)")
    p.add_argument("--nproc", type=int, default=None, help="ranks (default: the GPUs, or 2 on the CPU; 1 with --comm emulate)")
    p.add_argument("--comm", default="auto", help="nccl, gloo, emulate or auto (default: nccl with >= 2 GPUs, emulate with one, gloo on the CPU)")
    p.add_argument("--emulate-world", type=int, default=8, help="--comm emulate: ranks emulated (default 8)")
    p.add_argument("--busbw", type=float, default=None, help="--comm emulate: bus bandwidth in GB/s the proxies are paced to "
                   "(default 280: all-reduce busbw measured on 2 x H200 NVLink)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per rank (default 10; 3 on the CPU)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 3; 1 on the CPU)")
    p.add_argument("--tiny", action="store_true", help="a tiny model (the default on the CPU)")
    for name in ("layers", "d-model", "heads", "seq", "batch", "vocab", "experts-per-rank"):
        p.add_argument(f"--{name}", type=int, help=f"model {name.replace('-', ' ')}")
    p.add_argument("--micro-sizes", type=comma_list, help="bytes all-reduced by micro, comma-separated")
    p.add_argument("--trace", metavar="DIR", help="write a torch.profiler trace per strategy and rank: DIR/<workload>/<strategy>/rank<r>_trace.json.gz, which `ccoverlap analyze DIR/<workload>` reads")
    p.add_argument("--launcher", choices=("spawn", "torchrun"), default="spawn", help="how ranks start (default: spawn)")
    p.add_argument("--json", metavar="PATH", help="write results (with provenance) here, and a bar chart beside it")
    p.set_defaults(run=run)


def _config(args):
    from ccoverlap.bench import config as c

    gpus = _gpu_count()
    device = args.device if args.device != "auto" else ("cuda" if gpus else "cpu")
    cpu = device == "cpu"
    size = c.TINY if (args.tiny or cpu) else c.FULL
    overrides = {k: getattr(args, k) for k in vars(size) if getattr(args, k, None) is not None}
    workloads = c.WORKLOADS if args.workload == ("all",) else args.workload
    try:
        micro = tuple(int(v) for v in args.micro_sizes) if args.micro_sizes else (c.MICRO_TINY if args.tiny or cpu else c.MICRO_FULL)
    except ValueError:
        raise UsageError(f"--micro-sizes {','.join(args.micro_sizes)}: whole numbers of bytes, comma-separated") from None
    one = args.nproc == 1 or (args.nproc is None and gpus == 1)
    comm = args.comm if args.comm != "auto" else ("gloo" if cpu else "emulate" if one else "nccl")
    return c.BenchConfig(
        workloads=workloads,
        strategies=args.strategies or c.BenchConfig.__dataclass_fields__["strategies"].default,
        device=device, nproc=_given(args.nproc, 1 if comm == "emulate" else gpus if device == "cuda" and gpus else 2),
        comm=comm, emulate_world=args.emulate_world, busbw_gbps=_given(args.busbw, c.DEFAULT_BUSBW_GBPS),
        steps=_given(args.steps, 3 if cpu else 10), warmup=_given(args.warmup, 1 if cpu else 3),
        size=type(size)(**(vars(size) | overrides)), micro_sizes=micro, trace_dir=args.trace, gpus=gpus,
        micro_gemm=256 if (args.tiny or cpu) else 8192,
    ).validate()


def _given(value, default):
    return default if value is None else value


def _gpu_count() -> int:
    from ccoverlap import cuda_driver

    drv = cuda_driver.driver()
    return drv.device_count() if drv else 0


def run(args: argparse.Namespace) -> int:
    cfg = _config(args)
    from ccoverlap.bench.config import torch_available

    torch_available()
    from rich.progress import Progress

    from ccoverlap import provenance
    from ccoverlap.bench import launcher

    if cfg.comm == "nccl" and cfg.nproc == 1:
        print_text("note: one rank: NCCL collectives of a single rank move no data between GPUs")
    if cfg.comm == "emulate":
        print_text(f"EMULATION: one process stands in for rank 0 of {cfg.emulate_world}; each collective is a proxy kernel "
                   f"paced to {cfg.busbw_gbps:g} GB/s bus bandwidth" + ("" if cfg.device == "cuda" else " (CPU: data only, no proxy)"))
    out = Path(args.json) if args.json else None
    prov = provenance.collect(backend=cfg.backend, world_size=cfg.nproc) if out else None
    rows: list[dict] = []
    with Progress(transient=True) as bar:
        task = bar.add_task("bench", total=len(cfg.strategies))
        for label, new in launcher.run_iter(cfg, args.launcher):
            rows += new
            bar.update(task, advance=1, description=label)
            if out:  # after every strategy, so a run cut short keeps what it measured
                _write(out, cfg, prov, rows, complete=False)
    match = launcher.compare(rows)
    _print(rows, match)
    if out:
        _write(out, cfg, prov, rows, complete=True, match=match)
        from ccoverlap.bench.plots import bars

        bars(rows, out.with_suffix(".png"))
        print_text(f"wrote {out} and {out.with_suffix('.png')}")
    failed = [r for r in rows if r["status"].startswith("failed")]
    return 1 if failed or not all(m["match"] for m in match.values()) else 0


def _write(out: Path, cfg, prov: dict, rows: list[dict], complete: bool, match: dict | None = None) -> None:
    """Replace `out` atomically with the results so far."""
    write_json(out, {"provenance": prov, "config": json.loads(json.dumps(vars(cfg), default=lambda o: vars(o))),
                     "complete": complete, "rows": rows, "outputs_match": match})


def _fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def _print(rows: list[dict], match: dict) -> None:
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        verdict = match.get(workload, {})
        title = f"{workload}: outputs match: {'yes' if verdict.get('match') else 'NO'} ({verdict.get('how', '-')})"
        if workload == "micro":
            print_table(title, ["strategy", "size (B)", "count", "type", "time (ms)", "algbw (GB/s)", "busbw (GB/s)",
                                "step with GEMMs (ms)", "exposed comm (ms)", "#wrong"],
                        [[r["strategy"], r["size_bytes"], r["count"], r["type"], _fmt(r["time_ms"], ".3f"), _fmt(r["algbw_GBps"]),
                          _fmt(r["busbw_GBps"]), _fmt(r["step_ms"], ".3f"), _fmt(r["exposed_comm_ms"], ".3f"), r["wrong"]]
                         if r["status"] == "ok" else [r["strategy"], r["status"]] + [""] * 8 for r in mine])
            continue
        print_table(title, ["strategy", "step ms (min-max)", "compute-only ms", "exposed comm ms", "status"],
                    [[r["strategy"], f"{r['step_ms']:.2f} ({r['step_ms_min']:.2f}-{r['step_ms_max']:.2f})",
                      _fmt(r["compute_only_ms"]), _fmt(r["exposed_comm_ms"]), "ok"]
                     if r["status"] == "ok" else [r["strategy"], "", "", "", r["status"][:80]] for r in mine])
