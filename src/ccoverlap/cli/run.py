"""`ccoverlap run`: run a command (and its children) with the launch interposer preloaded."""
from __future__ import annotations

import argparse
import os

from ccoverlap.control import policy
from ccoverlap.control.interposer import FIELDS, POLICY_ENV, Field
from ccoverlap.control.launch import command
from ccoverlap.control.procs import end_as
from ccoverlap.util.errors import UsageError
from ccoverlap.util.options import add_subcommand

EPILOG = """\
The policy comes from CCOVERLAP_POLICY (a JSON file), then CCOVERLAP_* variables,
then --strategy's policy fields, then these options (each overrides the variable of
the same name; an option that disagrees with --strategy is refused). It is checked
before CMD starts: bad input exits with code 2. Communication kernels (NCCL's, RCCL's,
ccoverlap's proxies, and names matching --comm) are never padded. See docs/interposer.md.

--strategy COMBO applies a combination of levers (`ccoverlap levers`): their
environment variables, their policy fields, and their start-up calls (sm-carveout),
which a sitecustomize hook first on PYTHONPATH makes in every Python process of CMD
as it imports torch (a sitecustomize of your own still runs after it). A lever that
does not apply on this machine is refused, naming the lever and why. The interposer
is preloaded only where a lever or an option gives it a policy field.

--config POLICY applies a policy file that `ccoverlap tune` wrote (its levers,
environment knobs and communication regex) exactly as the tuner's trials ran it: the
same variables, the interposer with its whole policy (unset fields written empty, so
your CCOVERLAP_* variables do not change it) where it has policy fields, its start-up
calls. Not with --strategy or --policy; an option that disagrees with the file's policy
fields is refused. A policy is data: a knob may set only a tuning variable (NCCL's,
TORCH_NCCL_*, CUDA's launch variables, thread counts: the list in docs/tune.md); any
other (LD_PRELOAD, PYTHONPATH, BASH_ENV, PATH...) is refused unless --allow-env NAME.

CMD runs in a process group of its own under a keeper process: signals to ccoverlap
(SIGINT, SIGTERM, SIGHUP, SIGQUIT) go on to it; when it ends, whatever it left running
is stopped; when ccoverlap dies, even of SIGKILL, CMD and everything it started (torchrun's
workers too) are killed. The exit code is CMD's; where a signal killed CMD, ccoverlap dies
of the same signal.

examples:
  ccoverlap run --pad-bytes 16384 -- python train.py
  ccoverlap run --blocks 4 --stats stats-%p.json -- torchrun --nproc-per-node 8 train.py
  ccoverlap run --mode auto --exclude 'gemm|cutlass' -- python train.py
  ccoverlap run --strategy priority+shape -- torchrun --nproc-per-node 8 train.py
  ccoverlap run --config tuned.json -- torchrun --nproc-per-node 8 train.py
"""



def register(sub) -> None:
    p = add_subcommand(
        sub, "run", run,
        help="run a command with compute kernel launches padded (launch interposer)",
        description="Run CMD and its children with the launch interposer preloaded: every compute kernel "
        "launch gets the policy's extra dynamic shared memory, so fewer compute blocks are resident and "
        "communication kernels find room. The exit code and signals of CMD are passed through.",
        epilog=EPILOG,
    )
    p.add_argument("--policy", metavar="FILE", help=f"JSON policy file ({POLICY_ENV})")
    p.add_argument("--strategy", metavar="COMBO", help="apply a combination of levers, lever[=value]+... "
                   "(`ccoverlap levers`): their variables, policy fields and start-up calls")
    p.add_argument("--config", metavar="POLICY", help="apply a tuned policy file (`ccoverlap tune`): its levers "
                   "and knobs, as the tuner ran them")
    p.add_argument("--allow-env", metavar="NAME", action="append", default=[], help="with --config: let the "
                   "file's knob set NAME although it is no tuning variable (docs/tune.md), e.g. one you tuned "
                   "with `tune --env NAME=...`; repeatable")
    for field in FIELDS:  # one option per field of the interposer's policy table
        p.add_argument(field.option, metavar=field.metavar, dest=field.key, help=option_help(field))
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run")


def option_help(field: Field) -> str:
    """The --help line of a field: what it does, its valid values and default, its variable."""
    default = f"default {field.default}" if field.default else ""
    details = "; ".join(filter(None, (field.valid, default, field.env)))
    return f"{field.help} ({details})".replace("%", "%%")  # argparse formats help with %


def run(args: argparse.Namespace) -> int:
    cmd = command(args.argv, "ccoverlap run --pad-bytes 16384 -- python train.py")
    given = {f.key: v for f in FIELDS if (v := getattr(args, f.key)) is not None}
    if args.policy is not None and args.config is not None:
        raise UsageError("--config and --policy: give one (a tuned policy file is a whole policy)")
    base = dict(os.environ) | ({POLICY_ENV: os.path.abspath(args.policy)} if args.policy is not None else {})
    return end_as(policy.for_run(args.config, args.strategy, given, allow_env=args.allow_env).run(cmd, base))

