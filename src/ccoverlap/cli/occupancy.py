"""`ccoverlap occupancy`: resident blocks per SM for one footprint, and which resource limits it."""
from __future__ import annotations

import argparse

from ccoverlap.model.config import OccupancyConfig, OccupancyValidation
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import get_device
from ccoverlap.model.occupancy import occupancy

from ccoverlap.util.options import Outputs, add_options, add_subcommand, from_args
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
    add_options(p, OccupancyConfig)
    add_options(p, Outputs)
    add_options(p.add_argument_group("validation on a live GPU"), OccupancyValidation)


def run(args: argparse.Namespace) -> int:
    cfg = from_args(OccupancyConfig, args)
    checks = from_args(OccupancyValidation, args).validate()
    check_outputs({"--json": cfg.json, "--out": checks.out}, force=args.force)
    if checks.validate_carveout:
        return _validate_carveout(cfg.device, checks)
    if checks.kernels is not None:
        return _validate(cfg.device, checks)
    cfg.validate()
    dev = get_device(cfg.device)
    kernel = KernelFootprint(cfg.threads, cfg.regs, cfg.static_smem, cfg.dynamic_smem)
    occ = occupancy(dev, kernel)
    if cfg.json:
        write_json(cfg.json, {"device": dev.name, "kernel": vars(kernel) | {"name": None}, **occ.to_dict()},
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


def _validate(device: str, checks: OccupancyValidation) -> int:
    with Progress("compiling and comparing", checks.kernels) as bar:
        dev, rows = validate.validate(checks.kernels, checks.shapes, checks.seed, _ordinal(device),
                                      lambda done, _: bar.set(done))
    result = validate.report(dev, rows, provenance.collect(seed=checks.seed))
    if checks.out:
        write_json(checks.out, result, schema=True)
    bad = [r for r in rows if not r.match]
    print_text(f"{dev.name}: {len(rows) - len(bad)}/{len(rows)} footprints match CUDA's occupancy API")
    for r in bad[:20]:
        print_text(f"  mismatch: {r}")
    return 1 if bad else 0


def _ordinal(device: str) -> int:
    """The GPU a validation runs on: cuda:N, else 0."""
    return int(device.partition(":")[2] or 0) if device.startswith("cuda") else 0


def _validate_carveout(device: str, checks: OccupancyValidation) -> int:
    settings = sweep.Settings(reps=checks.reps, seed=checks.seed)
    cases = sweep.cases(checks.quick)
    print_text(f"{len(cases)} cases x {checks.reps} repetitions: about {settings.estimate_s(len(cases)):.1f} s")
    with Progress("measuring the carveout", len(cases) * checks.reps) as bar:
        dev, rows = sweep.sweep(cases, settings, _ordinal(device), lambda done, _: bar.set(done))
    if checks.out:
        write_json(checks.out, sweep.report(dev, rows, provenance.collect(seed=checks.seed, quick=checks.quick),
                                            settings), schema=True)
    print_text("\n".join(sweep.summary(dev, rows)))
    return 0 if all(r.agree and r.consistent for r in rows) else 1
