"""`ccoverlap tune`: the fastest levers for an unmodified program, kept only where measurably faster and equal in
result."""
from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import replace
from pathlib import Path

from ccoverlap.control.launch import command
from ccoverlap.tune import session
from ccoverlap.tune.config import TuneConfig
from ccoverlap.util.errors import UsageError
from ccoverlap.util.options import Outputs, add_command, add_options, from_args
from ccoverlap.util.output import beside, check_new_folder, check_outputs, in_place

EPILOG = """\
Every trial runs CMD afresh under one candidate (levers set environment variables,
the interposer's policy and torch start-up calls: they need a fresh process), with
the doctor's capture injected at start-up: steps 1..K are dropped, steps K+1..K+N
timed (CUDA events on GPUs), then every rank drains its GPU, records the norms of
its trained parameters and ends. The default runs first, twice; a run of it under
the profiler lets the doctor order the candidates (and skip the levers where it
sees no communication or no scheduling headroom). Candidates: every lever that
applies here at the values it lists to try (`ccoverlap levers`), and each --env
value. Successive halving screens them, levers that each helped are combined, and
the best is confirmed against the default. It is kept only if the 95% interval of
its step-time ratio to the default lies below 1 and its trained parameters match
the default's within the program's own run-to-run change; otherwise the default
is kept, and the output says why. Ctrl-C or SIGTERM ends the tuning with what it
has (the trial running is stopped).

DIR gets one folder per trial (step times, CMD's output), tune.json (every trial,
the verdict, provenance), tune.png and policy.json. Apply the policy with
`ccoverlap run --config DIR/policy.json -- CMD`, or ccoverlap.enable(path) in the
script. See docs/tune.md.

examples:
  ccoverlap tune -- python train.py
  ccoverlap tune --budget 30 --env NCCL_ALGO=Ring,Tree -- torchrun --nproc-per-node 8 train.py
  ccoverlap tune --levers priority,nccl-ctas --steps 30 -- python -m ccoverlap.bench.train ddp
"""


def register(sub) -> None:
    add_options(add_command(
        sub, "tune", TuneConfig, run,
        help="find the fastest levers for an unmodified program; keep them only if faster beyond noise, same result",
        description="Run CMD under the default and under candidate levers and environment knobs, each in fresh "
        "processes, time its optimizer steps, and keep the fastest setting only where it is faster than the "
        "default beyond the run-to-run noise and trains to the same parameters. Writes a policy file for "
        "`ccoverlap run --config` and ccoverlap.enable().",
        epilog=EPILOG, what="the command to tune",
    ), Outputs)


def _config(args: argparse.Namespace) -> TuneConfig:
    cfg = from_args(TuneConfig, args).validate()
    out = check_new_folder(cfg.out if cfg.out is not None else f"ccoverlap-tune-{dt.datetime.now():%Y%m%d-%H%M%S}",
                           "--out")
    if "" in (cfg.json, cfg.policy_out):  # not the default: a path left empty
        raise UsageError(f"{'--json' if cfg.json == '' else '--policy-out'} '': give a path")
    json_path = (cfg.json if in_place(cfg.json) else Path(cfg.json).absolute()) if cfg.json else out / "tune.json"
    policy_path = Path(cfg.policy_out).absolute() if cfg.policy_out else out / "policy.json"
    check_outputs({"--json": json_path, "--policy-out": policy_path,
                   "--json's chart": beside(json_path, ".png") or out / "tune.png"}, force=args.force)
    return replace(cfg, out=str(out), json=str(json_path), policy_out=str(policy_path))


def run(args: argparse.Namespace) -> int:
    cfg = _config(args)  # everything checked before the command first runs
    return session.run(cfg, command(args.argv, "ccoverlap tune --budget 10 -- torchrun --nproc-per-node 8 train.py"))
