"""`ccoverlap run`: run a command (and its children) with the launch interposer preloaded."""
from __future__ import annotations

import argparse
import os

from ccoverlap.control import policy
from ccoverlap.control.config import RunConfig
from ccoverlap.control.interposer import POLICY_ENV, parse
from ccoverlap.control.launch import command
from ccoverlap.control.procs import end_as
from ccoverlap.util.options import add_command, from_args
from ccoverlap.util.output import check_output

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
    add_command(
        sub, "run", RunConfig, run,
        help="run a command with compute kernel launches padded (launch interposer)",
        description="Run CMD and its children with the launch interposer preloaded: every compute kernel "
        "launch gets the policy's extra dynamic shared memory, so fewer compute blocks are resident and "
        "communication kernels find room. The exit code and signals of CMD are passed through.",
        epilog=EPILOG, what="the command to run",
    )


def run(args: argparse.Namespace) -> int:
    cmd = command(args.argv, "ccoverlap run --pad-bytes 16384 -- python train.py")
    cfg = from_args(RunConfig, args).validate()
    base = dict(os.environ) | ({POLICY_ENV: os.path.abspath(cfg.policy)} if cfg.policy is not None else {})
    launch = policy.for_run(cfg.config, cfg.strategy, cfg.given, allow_env=cfg.allow_env)
    if stats := parse(launch.environ(base))["stats"]:  # from --stats, CCOVERLAP_STATS or the policy file
        # checked before CMD starts, as this process's would be (each process writes its own where %p is given);
        # the interposer replaces an existing file whatever its mode, as --force would
        check_output(stats.replace("%p", str(os.getpid())), "--stats" if cfg.stats else "CCOVERLAP_STATS",
                     inputs=(cfg.policy, cfg.config), force=True)
    return end_as(launch.run(cmd, base))
