"""`ccoverlap plan`: the smallest compute pad that lets communication CTAs in, or why none does."""
from __future__ import annotations

import argparse

from ccoverlap.util.errors import UsageError
from ccoverlap.model.config import PlanConfig
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import get_device
from ccoverlap.model.planner import plan

from ccoverlap.util.options import Outputs, add_options, add_subcommand, from_args
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
    add_options(p, PlanConfig)
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
    cfg = from_args(PlanConfig, args)
    check_outputs({"--json": cfg.json}, force=args.force)
    dev = get_device(cfg.device)
    cfg.validate(dev)
    compute = KernelFootprint.from_spec(cfg.compute, "compute")
    comm, sources = comm_footprint(cfg.comm, dev.arch)
    if dev.vendor != "nvidia" and sources:
        raise UsageError("--comm nccl needs an NVIDIA device; give the RCCL footprint as a spec")
    result = plan(dev, compute, comm, cfg.per_sm, cfg.drain_blocks)
    if cfg.json:
        write_json(cfg.json, result.to_dict() | {"comm_sources": sources}, schema=True)
        return 0
    print_text(f"device {dev.name}: {dev.sm_count} SMs, {dev.smem_per_sm} B shared memory and "
               f"{dev.regs_per_sm} registers per SM\n{result.explain()}")
    return 0
