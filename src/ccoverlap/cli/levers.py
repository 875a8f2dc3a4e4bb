"""`ccoverlap levers`: every runtime control ccoverlap knows, and whether it applies on this machine."""
from __future__ import annotations

import argparse

from ccoverlap.control import levers
from ccoverlap.control.config import LeversConfig
from ccoverlap.util.options import Outputs, add_options, add_subcommand, from_args
from ccoverlap.util.output import check_outputs, write_json, print_table
from ccoverlap.whatif.transforms import TRANSFORMS

EPILOG = """\
A strategy is a combination of levers: lever[=value]+lever[=value]... (a lever
named alone takes its default value), or `default` (no lever) or `no-overlap`
(the baseline). Every tool (bench, lab, run, tune) takes these names.

examples:
  ccoverlap levers
  ccoverlap levers --json
  ccoverlap levers --strategy priority+nccl-cluster=1
"""


def register(sub) -> None:
    p = add_subcommand(
        sub, "levers", run,
        help="list every runtime lever (priority, shaping, carveouts, NCCL's knobs) and where it applies here",
        description="List the runtime levers ccoverlap can turn: what each sets, its values, what it costs, "
        "how the planner reasons about it, and whether it applies on this machine in a training process "
        "and in the lab. With --strategy, check a combination and print what it sets.",
        epilog=EPILOG,
    )
    add_options(p, LeversConfig)
    add_options(p, Outputs)


def run(args: argparse.Namespace) -> int:
    cfg = from_args(LeversConfig, args)
    check_outputs({"--json": cfg.json}, force=args.force)
    host = levers.Host.detect()
    if cfg.strategy:
        s = levers.strategy(cfg.strategy)
        setting = s.setting()
        out = {"strategy": s.name, "levers": s.values, "env": dict(setting.env), "policy": dict(setting.policy),
               "startup": dict(setting.startup),
               "applies": {scope: s.not_applicable(host, scope) or "yes" for scope in levers.SCOPES}}
        if cfg.json:
            write_json(cfg.json, out, schema=True)
        else:
            print_table(f"strategy {s.name}", ["what", "value"], [[k, v] for k, v in out.items() if k != "strategy"])
        return 0
    rows = [row | {"whatif": "no model" if isinstance(TRANSFORMS[row["name"]], levers.NotApplicable) else row["name"]}
            for row in levers.table(host)]
    if cfg.json:
        write_json(cfg.json, {"host": vars(host), "levers": rows}, schema=True)
        return 0
    nccl = ".".join(map(str, host.nccl)) if host.nccl else "none"
    print_table(
        f"Levers on this machine ({host.platform}, NCCL {nccl})",
        ["lever", "values (default)", "sets", "training process", "lab", "cost"],
        [[r["name"], f"{r['values']} ({r['default']})", r["sets"], _cell(r["applies"]["process"]),
          _cell(r["applies"]["lab"]), r["cost"]] for r in rows],
    )
    return 0


def _cell(reason: str) -> str:
    return reason if reason == "yes" else f"n/a: {reason}"
