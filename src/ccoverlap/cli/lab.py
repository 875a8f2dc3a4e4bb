"""`ccoverlap lab`: every overlap strategy side by side on one GPU, with footprint-matched comm proxies."""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

from ccoverlap.errors import UsageError

from ._output import comma_list, print_table, print_text, write_json

EPILOG = """\
The communication kernels are PROXIES: a reduce-copy whose threads, registers,
shared memory and cluster size match the installed NCCL's collective kernels
(--comm nccl) or a small one (--comm light). No data crosses GPUs.

strategies: sequential, naive, priority, shape, priority+shape, carveout, green,
shrink+shape+priority; ideal = max(compute alone, comm alone).
orders: comm launched before the compute, with it (right after), or delayed into it.

examples:
  ccoverlap lab --quick                              all families and strategies, < 3 min on an H200
  ccoverlap lab --compute fma --orders before,with,delayed --reps 20
  ccoverlap lab --compute gemm,transformer --comm light --out my-lab.json
"""


def register(sub) -> None:
    p = sub.add_parser(
        "lab",
        help="single-GPU contention lab: every strategy side by side (needs a CUDA GPU)",
        description="Run compute kernels against footprint-matched communication proxies on one GPU under "
        "every overlap strategy, in one process, and report total time, communication completion, "
        "compute slowdown, reduction vs sequential and overlap efficiency.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from ccoverlap.lab.config import FAMILIES, LabConfig

    d = LabConfig()
    p.add_argument("--quick", action="store_true", help="all families, nccl proxy, order 'with', 10 reps")
    p.add_argument("--compute", type=comma_list, default=FAMILIES, help=f"families, comma-separated (default: {','.join(FAMILIES)})")
    p.add_argument("--comm", type=comma_list, default=("nccl", "light"), help="proxies: nccl, light (default: both)")
    p.add_argument("--strategies", type=comma_list, default=d.strategies, help="subset of the strategies (default: all)")
    p.add_argument("--orders", type=comma_list, default=("before", "with", "delayed"), help="launch orders (default: all three)")
    p.add_argument("--reps", type=int, default=20, help="timed repetitions per cell, >= 10 (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed repetitions first (default 3)")
    p.add_argument("--comm-ctas", type=int, default=d.comm_ctas, help=f"NCCL proxy CTAs (default {d.comm_ctas}; light uses twice as many)")
    p.add_argument("--comm-mib", type=int, default=d.comm_mib, help=f"MiB per comm buffer (default {d.comm_mib})")
    p.add_argument("--shrink-threads", type=int, default=d.shrink_threads, help=f"comm threads for shrink+shape+priority (default {d.shrink_threads})")
    p.add_argument("--delay-ms", type=float, default=d.delay_ms, help=f"delay of the 'delayed' order (default {d.delay_ms})")
    p.add_argument("--fma-regs", type=int, default=d.fma_regs, help=f"register cap of the fma kernel (default {d.fma_regs})")
    p.add_argument("--fma-iters", type=int, default=d.fma_iters, help=f"FMA loop trips per thread (default {d.fma_iters})")
    p.add_argument("--out", help="results JSON (default bench/results/lab-<date>-<gpu>.json); PNGs beside it")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG charts")
    p.set_defaults(run=run)


def _config(args):
    from ccoverlap.lab.config import LabConfig

    if args.quick:
        return LabConfig(computes=args.compute, comms=("nccl",), strategies=args.strategies, orders=("with",),
                         reps=10, warmup=2, comm_ctas=args.comm_ctas, comm_mib=args.comm_mib,
                         shrink_threads=args.shrink_threads, fma_regs=args.fma_regs, fma_iters=args.fma_iters).validate()
    return LabConfig(computes=args.compute, comms=args.comm, strategies=args.strategies, orders=args.orders,
                     reps=args.reps, warmup=args.warmup, comm_ctas=args.comm_ctas, comm_mib=args.comm_mib,
                     shrink_threads=args.shrink_threads, delay_ms=args.delay_ms, fma_regs=args.fma_regs,
                     fma_iters=args.fma_iters).validate()


#: the lab's proxy kernel is communication to the interposer; gate "always": in the `with` and
#: `delayed` orders compute is launched before the proxy, yet shaped for it
LAB_POLICY = {"mode": "off", "comm": "^comm_proxy$", "gate": "always"}


def _rerun_with_interposer(args: argparse.Namespace) -> None:
    """Replace this process by the same command with the interposer preloaded (mode off; the
    runner switches it to auto around each shaped library phase)."""
    from ccoverlap.interposer import Policy, preload_env

    env = (dict(os.environ) | Policy(**LAB_POLICY).to_environ() | preload_env(os.environ)
           | {"CCOVERLAP_LAB_CHILD": "1"})
    print_text("preloading the launch interposer to shape library kernels (gemm, attention, transformer)")
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", "ccoverlap", *args.cli_argv], env)


def run(args: argparse.Namespace) -> int:
    cfg = _config(args)  # validate everything before touching the GPU
    from rich.progress import Progress

    from ccoverlap import cuda_driver, provenance
    from ccoverlap.lab.config import cells
    from ccoverlap.limits import get_device

    if cuda_driver.driver() is None:
        raise UsageError("the lab needs a CUDA GPU; without one, `ccoverlap plan` reasons about the same footprints")
    try:
        from ccoverlap.lab import plots, runner
    except ImportError as exc:
        raise UsageError(f"the lab needs PyTorch with CUDA: {exc}") from None
    from ccoverlap.interposer import preloaded
    from ccoverlap.lab.config import needs_interposer

    if needs_interposer(cfg) and not preloaded() and not os.environ.get("CCOVERLAP_LAB_CHILD"):
        _rerun_with_interposer(args)
    device = get_device("cuda")
    gpu = device.name.lower().replace("nvidia", "").strip().replace(" ", "-")
    out = Path(args.out or f"bench/results/lab-{dt.date.today().isoformat()}-{gpu}.json")
    with Progress() as bar:
        task = bar.add_task("measuring", total=cells(cfg))
        rows, timelines = runner.run(cfg, device, lambda what: bar.update(task, advance=1, description=what))
    result = {"provenance": provenance.collect(device_limits=device.to_dict()), "config": vars(cfg), "rows": rows}
    write_json(out, result)
    _print(rows)
    if not args.no_plots:
        stem = out.with_suffix("")
        plots.bars(rows, Path(f"{stem}-bars.png"), order=cfg.orders[0] if "with" not in cfg.orders else "with")
        first = (cfg.computes[0], cfg.comms[0])
        plots.timeline(timelines, first, ["naive", "priority", "priority+shape", "shrink+shape+priority"], Path(f"{stem}-timeline.png"))
    print_text(f"wrote {out}" + ("" if args.no_plots else " and its -bars.png, -timeline.png"))
    return 0


def _fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def _print(rows: list[dict]) -> None:
    for compute, comm in sorted({(r["compute"], r["comm"]) for r in rows}):
        mine = [r for r in rows if (r["compute"], r["comm"]) == (compute, comm)]
        c = mine[0]
        print_table(
            f"{compute} + {comm} proxy: compute alone {c['compute_alone_ms']:.2f} ms, comm alone "
            f"{c['comm_alone_ms']:.2f} ms, sequential {c['sequential_ms']:.2f} ms",
            ["strategy", "order", "total ms (min-max)", "comm done ms", "compute x", "vs seq", "E", "pad B", "ok"],
            [
                [r["strategy"], r["order"], f"{r['total_ms']:.2f} ({r['total_ms_min']:.2f}-{r['total_ms_max']:.2f})",
                 _fmt(r["comm_done_ms"]), _fmt(r["compute_slowdown"]), _fmt(100 * r["reduction_vs_sequential"], "+.1f") + "%",
                 _fmt(r["efficiency"]), r.get("pad_bytes", 0),
                 "-" if "outputs_match" not in r else "yes" if r["outputs_match"] and not r.get("comm_wrong") else "NO"]
                if r["status"] == "ok" else [r["strategy"], r["order"], r["status"][:70], "", "", "", "", "", ""]
                for r in mine
            ],
        )
