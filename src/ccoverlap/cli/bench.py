"""`ccoverlap bench`: distributed training steps under every strategy; step time, exposed communication."""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

from ccoverlap.bench.catalog import BY_NAME as BY_WORKLOAD
from ccoverlap.bench.catalog import VS_DEFAULT_NOTE, WORKLOADS
from ccoverlap.bench import comms
from ccoverlap.bench.config import PRESETS, TINY_PRESET, BenchConfig, auto_device
from ccoverlap.util.errors import UsageError
from ccoverlap.control.procs import exit_for
from ccoverlap.control import levers
from ccoverlap.control.levers import STRATEGIES
from ccoverlap.util.stats import CONFIDENCE

from ccoverlap.util.options import add_options, add_preset, from_args
from ccoverlap.util.output import Progress, check_writable, print_table, print_text, warn, write_json

EPILOG = "\n".join(textwrap.fill(text, 100, break_on_hyphens=False) for text in (
    f"workloads: {', '.join(f'{w.name} ({w.description})' for w in WORKLOADS)}.",
    f"strategies: {', '.join(s.name for s in STRATEGIES)} (the lever registry's list), or any combination "
    "lever[=value]+lever... (`ccoverlap levers` lists them). Each runs in fresh ranks (all workloads in them) with "
    "the same seeds; losses are compared with `default` (outputs_match), and each row's steps with default's "
    f"(vs default: ratio of medians, {CONFIDENCE:.0%} bootstrap interval, faster, slower or within noise). A strategy with a lever that does not "
    "apply here (CUDA-only levers on the CPU, an NCCL too old) or that the --comm backend cannot honour is listed "
    "as n/a with the lever and the reason.",
    "",
    f"communication (--comm): {comms.valid()}; auto picks nccl with two or more GPUs, emulate with one, gloo on "
    "the CPU. Under emulate, one process stands in for rank 0 of --emulate-world ranks and every collective is a "
    "proxy kernel with NCCL's CTA footprint, moving a ring's bytes paced to --busbw. That is an EMULATION (docs/bench.md).",
    "",
)) + """
Ctrl-C, SIGINT or SIGTERM stop every rank (killed after a few seconds), remove the temporary folder,
and leave --json valid with "complete": false; exit 130 on SIGINT, death by SIGTERM.

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
        help=f"distributed workloads ({', '.join(w.name for w in WORKLOADS)}) under every strategy: step time, exposed comm",
        description="Run real torch.distributed workloads under each overlap strategy, each in fresh ranks, and "
        "report step time and exposed communication per strategy, checking that every strategy computes the same.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_preset(p, "--tiny", BenchConfig, TINY_PRESET, "a tiny model (the default on the CPU)")
    add_options(p, BenchConfig, PRESETS)
    p.add_argument("--launcher", choices=("spawn", "torchrun"), default="spawn", help="how ranks start (default: spawn)")
    p.add_argument("--json", metavar="PATH", help="write results (with provenance) here, and a bar chart beside it")
    p.set_defaults(run=run)


def _config(args) -> BenchConfig:
    gpus = _gpu_count()
    presets = [PRESETS[name] for name, on in (("on the CPU", auto_device(args.device, gpus) == "cpu"), ("--tiny", args.tiny)) if on]
    return from_args(BenchConfig, args, *presets).resolved(gpus).validate()


def _gpu_count() -> int:
    from ccoverlap.gpu import cuda_driver

    drv = cuda_driver.driver()
    return drv.device_count() if drv else 0


def run(args: argparse.Namespace) -> int:
    cfg = _config(args)
    out = Path(args.json) if args.json else None
    if out:
        check_writable(out, "--json")
    if cfg.trace_dir:
        check_writable(cfg.trace_dir, "--trace", directory=True)
    from ccoverlap.bench.config import torch_available

    torch_available()
    from ccoverlap.gpu import provenance
    from ccoverlap.bench import launcher

    if note := cfg.comm_backend.note(cfg):
        print_text(note)
    if cfg.trace_dir and cfg.untraced:
        warn(f"--trace: {', '.join(cfg.untraced)} has no training step to trace; traces are written for the others")
    prov = provenance.collect(backend=cfg.backend, world_size=cfg.nproc) if out else None
    rows: list[dict] = []
    names = [levers.strategy(s).name for s in cfg.strategies]
    try:
        with launcher.stop_on_signals(), Progress("bench", len(names)) as bar:
            bar.running(names[0])
            for i, (label, new) in enumerate(launcher.run_iter(cfg, args.launcher)):
                rows += new
                bar.advance(label)
                if i + 1 < len(names):
                    bar.running(names[i + 1])
                if out:  # after every strategy, so a run cut short keeps what it measured
                    _write(out, cfg, prov, rows, complete=False)
    except launcher.Stopped as stop:
        if out:
            launcher.against_default(rows)
            _write(out, cfg, prov, rows, complete=False, interrupted=str(stop))
        print(f"ccoverlap bench: stopped by {stop}: every rank ended" + (f"; {out} holds {len(rows)} rows (complete: false)" if out else ""),
              file=sys.stderr)
        return exit_for(stop.signum)
    match = launcher.compare(rows)
    unmatched = launcher.against_default(rows)
    if out:  # before printing: a closed pipe on stdout must not cost the results
        _write(out, cfg, prov, rows, complete=True, match=match)
        chart = _chart(rows, out.with_suffix(".png"))
    _print(rows, match, unmatched)
    if out:
        print_text(f"wrote {out}" + (f" and {chart}" if chart else ""))
    failed = [r for r in rows if r["status"].startswith("failed")]
    return 1 if failed or not all(m["match"] for m in match.values()) else 0


def _chart(rows: list[dict], path: Path) -> Path | None:
    """The bar chart, or a warning: a picture that fails does not fail the run."""
    from ccoverlap.bench.plots import bars

    try:
        return bars(rows, path)
    except Exception as exc:  # noqa: BLE001 - any plotting failure is a warning
        warn(f"no chart {path}: {type(exc).__name__}: {exc}")
        return None


def _write(out: Path, cfg: BenchConfig, prov: dict, rows: list[dict], complete: bool, match: dict | None = None,
           interrupted: str | None = None) -> None:
    """Replace `out` atomically with the results so far; a write that fails (a full disk) ends the run in one line."""
    result = {"provenance": prov, "config": json.loads(json.dumps(vars(cfg), default=lambda o: vars(o))),
              "complete": complete, "rows": rows, "outputs_match": match} | ({"interrupted": interrupted} if interrupted else {})
    try:
        write_json(out, result)
    except OSError as exc:
        raise UsageError(f"--json {out}: cannot write: {exc.strerror or exc}") from None


def _print(rows: list[dict], match: dict, unmatched: dict[str, str | None]) -> None:
    """One table per workload; `unmatched`: why a workload's rows have no comparison with default (None: they have)."""
    for workload in dict.fromkeys(r["workload"] for r in rows):
        kind = BY_WORKLOAD[workload].rows
        verdict = match.get(workload, {})
        why = f"; {unmatched[workload]}" if unmatched.get(workload) else ""
        print_table(f"{workload}: outputs match: {'yes' if verdict.get('match') else 'NO'} ({verdict.get('how', '-')}){why}",
                    list(kind.columns), [kind.table_row(r) for r in rows if r["workload"] == workload])
    print_text(VS_DEFAULT_NOTE)
