"""`ccoverlap lab`: every overlap strategy side by side on one GPU, with footprint-matched comm proxies."""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

from ccoverlap.util.errors import UsageError
from ccoverlap.control.levers import NO_OVERLAP
from ccoverlap.lab.config import CASES, QUICK, LabConfig

from ccoverlap.util.options import Outputs, add_options, add_preset, add_subcommand, from_args
from ccoverlap.util.output import Progress, beside, check_outputs, print_table, print_text, write_json
from ccoverlap.util.text import shorten
from ccoverlap.control.interposer import preloaded
from ccoverlap.control.launch import Launch
from ccoverlap.gpu import cuda_driver, provenance
from ccoverlap.lab.config import cells, needs_interposer
from ccoverlap.model.limits import get_device

EPILOG = """\
The communication kernels are PROXIES: a reduce-copy whose threads, registers,
shared memory and cluster size match the installed NCCL's collective kernels
(--comm nccl), the AllReduce NCCL was seen launching (--comm nccl-allreduce), or
a small one (--comm light); --comm-busbw paces them like a link. No data crosses GPUs.

strategies are lever combinations (`ccoverlap levers`): no-overlap (compute, then
comm, on one stream), default (two streams, no lever), priority, priority+shape,
nccl-cluster=1+priority, ...; levers without a mechanism in one process say n/a.
ideal = max(compute alone, comm alone).
orders: comm launched before the compute, with it (right after), or delayed into it.

examples:
  ccoverlap lab --quick                              all families and strategies, < 3 min on an H200
  ccoverlap lab --case carveout                      a lever case of docs/lab.md \
(carveout, green-cluster, persistent-gemm)
  ccoverlap lab --compute fma --strategies default,priority,green+nccl-cluster=1 --reps 20
  ccoverlap lab --compute gemm,transformer --comm light --out my-lab.json
"""


def register(sub) -> None:
    p = add_subcommand(
        sub, "lab", run,
        help="single-GPU contention lab: every strategy side by side (needs a CUDA GPU)",
        description="Run compute kernels against footprint-matched communication proxies on one GPU under "
        "every overlap strategy, in one process, and report total time, communication completion, "
        "compute slowdown, reduction vs sequential and overlap efficiency.",
        epilog=EPILOG,
    )
    add_preset(p, "--quick", LabConfig, QUICK, "all families against the nccl proxy, < 3 min on an H200")
    p.add_argument("--case", choices=tuple(CASES), help="a lever case of docs/lab.md: its families, proxy and "
                   "strategies (options given win)")
    add_options(p, LabConfig, {"--quick": QUICK})
    p.add_argument("--out", help="results JSON (default bench/results/lab-<date>-<gpu>.json); PNGs beside it")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG charts")
    add_options(p, Outputs)


def _config(args) -> LabConfig:
    presets = ([QUICK] if args.quick else []) + ([CASES[args.case]] if args.case else [])
    return from_args(LabConfig, args, *presets).validate()


#: gate "always": in the `with` and `delayed` orders compute is launched before the proxy (communication to the
#: interposer, as every comm_proxy is: model/comm.py), yet shaped for it
LAB_POLICY = {"mode": "off", "gate": "always"}


def _rerun_with_interposer(args: argparse.Namespace) -> None:
    """Replace this process by the same command with the interposer preloaded (mode off; the
    runner switches it to auto around each shaped library phase)."""
    env = Launch(fields=LAB_POLICY).environ(os.environ) | {"CCOVERLAP_LAB_CHILD": "1"}
    print_text("preloading the launch interposer to shape library kernels (gemm, attention, transformer)")
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", "ccoverlap", *args.cli_argv], env)


def _charts(out: Path | str) -> dict[str, Path | None]:
    """The PNGs written beside --out (none where it is written in place)."""
    stem = beside(out, "")
    return {"--out's bars": stem and Path(f"{stem}-bars.png"),
            "--out's timeline": stem and Path(f"{stem}-timeline.png")}


def run(args: argparse.Namespace) -> int:
    cfg = _config(args)  # validate everything before touching the GPU
    if args.out is not None:
        check_outputs({"--out": args.out, **({} if args.no_plots else _charts(args.out))}, force=args.force)
    if cuda_driver.driver() is None:
        raise UsageError("the lab needs a CUDA GPU; without one, `ccoverlap plan` reasons about the same footprints")
    try:
        from ccoverlap.lab import plots, runner  # on use: torch with CUDA, its absence one line
    except ImportError as exc:
        raise UsageError(f"the lab needs PyTorch with CUDA: {exc}") from None
    if needs_interposer(cfg) and not preloaded() and not os.environ.get("CCOVERLAP_LAB_CHILD"):
        _rerun_with_interposer(args)
    device = get_device("cuda")
    gpu = device.name.lower().replace("nvidia", "").strip().replace(" ", "-")
    out = Path(args.out or f"bench/results/lab-{dt.date.today().isoformat()}-{gpu}.json")
    with Progress("lab", cells(cfg)) as bar:
        rows, timelines = runner.run(cfg, device, bar.advance)
    result = {"provenance": provenance.collect(device_limits=device.to_dict()), "config": vars(cfg), "rows": rows}
    write_json(out, result, schema=True)
    _print(rows)
    charts = {} if args.no_plots else _charts(out)
    if charts.get("--out's bars"):
        plots.bars(rows, charts["--out's bars"], order=cfg.orders[0] if "with" not in cfg.orders else "with")
        first = (cfg.computes[0], cfg.comms[0])
        plots.timeline(timelines, first, [s for s in cfg.strategies if s != NO_OVERLAP][:4], charts["--out's timeline"])
    print_text(f"wrote {out}" + (" and its -bars.png, -timeline.png" if charts.get("--out's bars") else ""))
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
                 _fmt(r["comm_done_ms"]), _fmt(r["compute_slowdown"]),
                 _fmt(100 * r["reduction_vs_sequential"], "+.1f") + "%",
                 _fmt(r["efficiency"]), r.get("pad_bytes", 0),
                 "-" if "outputs_match" not in r else "yes" if r["outputs_match"] and not r.get("comm_wrong") else "NO"]
                if r["status"] == "ok"
                else [r["strategy"], r["order"], shorten(r["status"], 70), "", "", "", "", "", ""]
                for r in mine
            ],
        )
