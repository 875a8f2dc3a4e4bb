"""`ccoverlap bench`: distributed training steps under every strategy; step time, exposed communication."""
from __future__ import annotations

import argparse
import textwrap

from ccoverlap.bench.catalog import WORKLOADS
from ccoverlap.bench import comms
from ccoverlap.bench.config import ALL, DEFAULT_STRATEGIES, PRESETS, TINY_PRESET, BenchConfig, auto_device
from ccoverlap.util.stats import CONFIDENCE

from ccoverlap.util.options import Outputs, add_options, add_preset, add_subcommand, from_args
from ccoverlap.util.output import beside, check_output, check_outputs
from ccoverlap.gpu import cuda_driver
from ccoverlap.bench.config import torch_available

EPILOG = "\n".join(textwrap.fill(text, 100, break_on_hyphens=False) for text in (
    f"workloads: {', '.join(f'{w.name} ({w.description})' for w in WORKLOADS)}.",
    f"strategies: {', '.join(DEFAULT_STRATEGIES)} by default; {ALL} for the lever registry's list, or any "
    "combination lever[=value]+lever... (`ccoverlap levers` lists them). Each runs in --repeats fresh process sets "
    "(all workloads in each), interleaved (A B C A B C ...), with the same seeds; losses are compared with `default` "
    "(outputs_match), and each row's steps with default's (vs default: ratio of medians, "
    f"{CONFIDENCE:.0%} interval of a bootstrap over process sets and then steps, faster, slower or within noise); "
    "under each table, the best strategy beyond that noise, or none. A strategy with a lever that does not apply "
    "here (CUDA-only levers on the CPU, an NCCL too old) or that the --comm backend cannot honour is not run: it is "
    "listed once, under the tables, with the lever and the reason. Progress on stderr: on a terminal a bar naming the "
    "process set and the workload running; in a log or a pipe a line as sets end, with the time so far and the "
    "estimated total.",
    "",
    f"communication (--comm): {comms.valid()}; auto picks nccl with two or more GPUs, emulate with one, gloo on "
    "the CPU. Under emulate, one process stands in for rank 0 of --emulate-world ranks and every collective is a "
    "proxy kernel with NCCL's CTA footprint, moving a ring's bytes paced to --busbw. "
    "That is an EMULATION (docs/bench.md).",
    "",
)) + """
Ctrl-C, SIGINT, SIGTERM or SIGHUP stop every rank (killed after a few seconds), remove the temporary folder,
and leave --json valid with "complete": false; exit 130 on SIGINT, death by the signal otherwise.

examples:
  ccoverlap bench                                  what is here: all GPUs with NCCL, one GPU emulated, \
or 2 CPU ranks with gloo
  ccoverlap bench --strategies all --repeats 5     every strategy of the registry, 5 process sets each
  ccoverlap bench --workload ddp --strategies default,default      an A/A check: default#2 should be within noise
  ccoverlap bench --comm emulate --emulate-world 8 --busbw 280 --workload ddp,fsdp
  ccoverlap bench --workload ddp,moe --device cpu --nproc 2 --steps 3 --tiny --json out.json
  ccoverlap bench --workload ddp --strategies no-overlap,default,priority --trace traces/
  ccoverlap analyze traces/ddp --baseline traces/ddp/no-overlap --report ddp.html
"""


def register(sub) -> None:
    p = add_subcommand(
        sub, "bench", run,
        help=f"distributed workloads ({', '.join(w.name for w in WORKLOADS)}) under every strategy: "
        "step time, exposed comm",
        description="Run real torch.distributed workloads under each overlap strategy, each in fresh ranks, and "
        "report step time and exposed communication per strategy, checking that every strategy computes the same.",
        epilog=EPILOG,
    )
    add_preset(p, "--tiny", BenchConfig, TINY_PRESET, "a tiny model (the default on the CPU)")
    add_options(p, BenchConfig, PRESETS)
    p.add_argument("--launcher", choices=("spawn", "torchrun"), default="spawn",
                   help="how ranks start (default: spawn)")
    p.add_argument("--json", metavar="PATH", help="write results (with provenance) here, and a bar chart beside it "
                   "(-: standard output, no chart)")
    add_options(p, Outputs)


def _config(args) -> BenchConfig:
    gpus = _gpu_count()
    presets = [PRESETS[name] for name, on in (("on the CPU", auto_device(args.device, gpus) == "cpu"),
                                              ("--tiny", args.tiny)) if on]
    return from_args(BenchConfig, args, *presets).resolved(gpus).validate()


def _gpu_count() -> int:
    drv = cuda_driver.driver()
    return drv.device_count() if drv else 0


def run(args: argparse.Namespace) -> int:
    cfg = _config(args)
    out = args.json
    check_outputs({"--json": out, "--json's chart": beside(out, ".png")}, force=args.force)
    if cfg.trace_dir:
        check_output(cfg.trace_dir, "--trace", directory=True)
    torch_available()
    from ccoverlap.bench import session  # on use: torch (every command's module loads at each start)

    return session.run(cfg, args.launcher, out)
