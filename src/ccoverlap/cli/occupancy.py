"""`ccoverlap occupancy`: resident blocks per SM for one footprint, and which resource limits it."""
from __future__ import annotations

import argparse

from ccoverlap.util.errors import UsageError, check_range
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import device_help, get_device
from ccoverlap.model.occupancy import occupancy

from ccoverlap.util.options import Outputs, add_options, add_subcommand
from ccoverlap.util.output import Progress, check_outputs, print_text, write_json
from ccoverlap.gpu import provenance
from ccoverlap.lab import carveout_sweep as sweep
from ccoverlap.lab import validate

EPILOG = """\
examples:
  ccoverlap occupancy --device h200 --threads 256 --regs 32
  ccoverlap occupancy --device h200 --threads 640 --regs 96 --static-smem 22592 --dynamic-smem 82240
  ccoverlap occupancy --validate 80 --out occupancy.json     (live GPU + CuPy: model vs CUDA's API)
  ccoverlap occupancy --validate-carveout --out carveout.json (live GPU: when a kernel starts beside another)
"""


def register(sub) -> None:
    p = add_subcommand(
        sub, "occupancy", run,
        help="resident blocks per SM for a kernel footprint (CUDA's occupancy rules, exactly)",
        description="Resident blocks per SM of a kernel, equal to cuOccupancyMaxActiveBlocksPerMultiprocessor, "
        "with the limit each resource (warps, registers, shared memory, blocks) sets on its own.",
        epilog=EPILOG,
    )
    p.add_argument("--device", default="cuda", help=device_help("cuda[:N] (default: live GPU)"))
    p.add_argument("--threads", type=int, help="threads per block (1..1024)")
    p.add_argument("--regs", type=int, help="registers per thread (1..255 on NVIDIA)")
    p.add_argument("--static-smem", type=int, default=0, help="static shared memory per block, bytes (default 0)")
    p.add_argument("--dynamic-smem", type=int, default=0, help="dynamic shared memory per block, bytes (default 0)")
    p.add_argument("--json", metavar="PATH", help="write JSON to PATH instead of the table (-: standard output)")
    add_options(p, Outputs)
    v = p.add_argument_group("validation on a live GPU")
    v.add_argument("--validate", type=int, metavar="KERNELS",
                   help="compile KERNELS kernels and compare the model with CUDA's occupancy API")
    v.add_argument("--shapes", type=int, default=16, help="launch shapes per kernel with --validate (default 16)")
    v.add_argument("--seed", type=int, default=0, help="random seed for --validate and --validate-carveout (default 0)")
    v.add_argument("--out", help="write the --validate or --validate-carveout table (JSON with provenance) here")
    v.add_argument(
        "--validate-carveout", action="store_true",
        help="measure when a kernel starts on SMs that another holds (shared-memory carveout) "
        "and compare with the model",
    )
    v.add_argument("--quick", action="store_true", help="with --validate-carveout: 14 cases, a smoke test")
    v.add_argument("--reps", type=int, default=3, help="repetitions per case with --validate-carveout (default 3)")


def run(args: argparse.Namespace) -> int:
    check_outputs({"--json": args.json, "--out": args.out}, force=args.force)
    if args.validate_carveout:
        return _validate_carveout(args)
    if args.validate is not None:
        return _validate(args)
    if args.threads is None or args.regs is None:
        raise UsageError("--threads and --regs are required (or --validate KERNELS on a live GPU)")
    dev = get_device(args.device)
    kernel = KernelFootprint(args.threads, args.regs, args.static_smem, args.dynamic_smem)
    occ = occupancy(dev, kernel)
    if args.json:
        write_json(args.json, {"device": dev.name, "kernel": vars(kernel) | {"name": None}, **occ.to_dict()},
                   schema=True)
        return 0
    limits = ", ".join(f"{k.replace('_', ' ')} {'-' if v is None else v}" for k, v in occ.limits.items())
    why = " and ".join(r.value.replace("_", " ") for r in occ.limiting)
    print_text(
        f"{occ.blocks} blocks/SM on {dev.name}, limited by {why}\n"
        f"limits: {limits}\n"
        f"per block: {occ.smem_per_block} B shared memory allocated, {occ.regs_per_warp} registers per warp"
    )
    return 0


def _validate(args: argparse.Namespace) -> int:
    check_range("--validate", args.validate, 1, 10000)
    check_range("--shapes", args.shapes, 1, 10000)
    ordinal = _ordinal(args.device)
    with Progress("compiling and comparing", args.validate) as bar:
        dev, rows = validate.validate(args.validate, args.shapes, args.seed, ordinal, lambda done, _: bar.set(done))
    result = validate.report(dev, rows, provenance.collect(seed=args.seed))
    if args.out:
        write_json(args.out, result, schema=True)
    bad = [r for r in rows if not r.match]
    print_text(f"{dev.name}: {len(rows) - len(bad)}/{len(rows)} footprints match CUDA's occupancy API")
    for r in bad[:20]:
        print_text(f"  mismatch: {r}")
    return 1 if bad else 0


def _ordinal(device: str) -> int:
    """The GPU a validation runs on: cuda:N, else 0."""
    return int(device.partition(":")[2] or 0) if device.startswith("cuda") else 0


def _validate_carveout(args: argparse.Namespace) -> int:
    check_range("--reps", args.reps, 1, 100)
    settings = sweep.Settings(reps=args.reps, seed=args.seed)
    cases = sweep.cases(args.quick)
    print_text(f"{len(cases)} cases x {args.reps} repetitions: about {settings.estimate_s(len(cases)):.1f} s")
    with Progress("measuring the carveout", len(cases) * args.reps) as bar:
        dev, rows = sweep.sweep(cases, settings, _ordinal(args.device), lambda done, _: bar.set(done))
    if args.out:
        write_json(args.out, sweep.report(dev, rows, provenance.collect(seed=args.seed, quick=args.quick), settings),
                   schema=True)
    print_text("\n".join(sweep.summary(dev, rows)))
    return 0 if all(r.agree and r.consistent for r in rows) else 1
