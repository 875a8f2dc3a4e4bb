"""`ccoverlap plan`: the smallest compute pad that lets communication CTAs in, or why none does."""
from __future__ import annotations

import argparse

from ccoverlap.util.errors import UsageError, check_range
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import device_help, get_device
from ccoverlap.model.planner import plan

from ccoverlap.util.options import Outputs, add_options, add_subcommand
from ccoverlap.util.output import check_outputs, write_json, print_text
from ccoverlap.model.nccl import nccl_footprint

EPILOG = """\
specs are comma-separated key=value: threads, regs, static, dynamic (bytes; K/KiB
suffix allowed), ctas (alias grid), cluster, name.
--comm nccl uses the installed NCCL's footprint; nccl:threads=288 overrides a field.

examples:
  ccoverlap plan --device h200 --compute threads=256,regs=16 --comm nccl
  ccoverlap plan --device h200 --compute threads=256,regs=16 --comm nccl:threads=288
  ccoverlap plan --device a100 --compute threads=128,regs=64,dynamic=48K --comm threads=512,regs=32,ctas=8 --json
"""


def register(sub) -> None:
    p = add_subcommand(
        sub, "plan", run,
        help="plan the occupancy-shaping pad of a compute kernel against a communication kernel",
        description="Find the smallest extra dynamic shared memory per compute block such that --per-sm "
        "communication CTAs are resident beside the compute blocks on every SM, or say which resource "
        "makes that impossible and what would make room.",
        epilog=EPILOG,
    )
    p.add_argument("--device", default="cuda", help=device_help("cuda[:N] (default: live GPU)"))
    p.add_argument("--compute", required=True, metavar="SPEC",
                   help="compute kernel footprint, e.g. threads=256,regs=32")
    p.add_argument("--comm", default="nccl", metavar="SPEC",
                   help="communication footprint spec, or nccl[:overrides] (default: nccl)")
    p.add_argument("--per-sm", type=int, default=1,
                   help="communication CTAs to fit beside compute on each SM (default 1)")
    p.add_argument(
        "--drain", default="0", metavar="N|auto",
        help="compute blocks per SM that may retire before the comm CTAs fit (default 0: resident at once; "
        "auto: 1 when the padded compute grid spans >= 2 waves, which needs ctas= in --compute)",
    )
    p.add_argument("--json", metavar="PATH", help="write JSON to PATH instead of the table (-: standard output)")
    add_options(p, Outputs)


def comm_footprint(spec: str, arch: str) -> tuple[KernelFootprint, dict[str, str]]:
    """Parse --comm: a spec, or 'nccl' optionally followed by ':key=value,...' overrides."""
    head, _, overrides = spec.partition(":")
    if head.strip().lower() != "nccl":
        return KernelFootprint.from_spec(spec, "comm"), {}
    found = nccl_footprint(arch=arch)
    fp = KernelFootprint.from_spec(overrides, "comm", base=found.footprint) if overrides else found.footprint
    return fp, found.sources


def run(args: argparse.Namespace) -> int:
    check_outputs({"--json": args.json}, force=args.force)
    dev = get_device(args.device)
    check_range("--per-sm", args.per_sm, 1, dev.max_blocks_per_sm)
    compute = KernelFootprint.from_spec(args.compute, "compute")
    comm, sources = comm_footprint(args.comm, dev.arch)
    if dev.vendor != "nvidia" and sources:
        raise UsageError("--comm nccl needs an NVIDIA device; give the RCCL footprint as a spec")
    if args.drain == "auto":
        drain = None
    elif args.drain.isdigit():
        drain = check_range("--drain", int(args.drain), 0, dev.max_blocks_per_sm)
    else:
        raise UsageError(f"--drain {args.drain!r}: valid 0..{dev.max_blocks_per_sm} or auto")
    result = plan(dev, compute, comm, args.per_sm, drain)
    if args.json:
        write_json(args.json, result.to_dict() | {"comm_sources": sources}, schema=True)
        return 0
    print_text(f"device {dev.name}: {dev.sm_count} SMs, {dev.smem_per_sm} B shared memory and "
               f"{dev.regs_per_sm} registers per SM\n{result.explain()}")
    return 0
