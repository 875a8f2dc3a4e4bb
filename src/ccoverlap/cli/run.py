"""`ccoverlap run`: run a command (and its children) with the launch interposer preloaded."""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys

from ccoverlap.errors import UsageError
from ccoverlap.interposer import FIELDS, POLICY_ENV, Field, parse, preload_env

EPILOG = """\
The policy comes from CCOVERLAP_POLICY (a JSON file), then CCOVERLAP_* variables,
then these options (each overrides the variable of the same name). It is checked
before CMD starts: bad input exits with code 2. Communication kernels (names with
nccl or rccl, or matching --comm) are never padded. See docs/interposer.md.

examples:
  ccoverlap run --pad-bytes 16384 -- python train.py
  ccoverlap run --blocks 4 --stats stats-%p.json -- torchrun --nproc-per-node 8 train.py
  ccoverlap run --mode auto --exclude 'gemm|cutlass' -- python train.py
"""

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def register(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a command with compute kernel launches padded (launch interposer)",
        description="Run CMD and its children with the launch interposer preloaded: every compute kernel "
        "launch gets the policy's extra dynamic shared memory, so fewer compute blocks are resident and "
        "communication kernels find room. The exit code and signals of CMD are passed through.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--policy", metavar="FILE", help=f"JSON policy file ({POLICY_ENV})")
    for field in FIELDS:  # one option per field of the interposer's policy table
        p.add_argument(field.option, metavar=field.metavar, dest=field.key, help=option_help(field))
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run")
    p.set_defaults(run=run)


def option_help(field: Field) -> str:
    """The --help line of a field: what it does, its valid values and default, its variable."""
    default = f"default {field.default}" if field.default else ""
    details = "; ".join(filter(None, (field.valid, default, field.env)))
    return f"{field.help} ({details})".replace("%", "%%")  # argparse formats help with %


def child_environ(args: argparse.Namespace, environ: dict[str, str]) -> dict[str, str]:
    """`environ` with the options applied and the library preloaded; UsageError if the policy is bad.
    Paths are made absolute: the command may change directory."""
    env = dict(environ)
    if args.policy is not None:
        env[POLICY_ENV] = os.path.abspath(args.policy)
    for field in FIELDS:
        value = getattr(args, field.key)
        if value is not None:
            env[field.env] = os.path.abspath(value) if field.kind == "path" else value
    parse(env)
    return env | preload_env(env)


def run(args: argparse.Namespace) -> int:
    cmd = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not cmd:
        raise UsageError("give the command to run after --, e.g. ccoverlap run --pad-bytes 16384 -- python train.py")
    env = child_environ(args, dict(os.environ))
    if shutil.which(cmd[0], path=env.get("PATH")) is None:
        raise UsageError(f"command not found: {cmd[0]}")
    return supervise(cmd, env)


def supervise(cmd: list[str], env: dict[str, str]) -> int:
    """Run `cmd` in its own process group, forward termination signals to the whole group
    (torchrun and its workers), and end the way it ended: same exit code, or same signal."""
    child = subprocess.Popen(cmd, env=env, preexec_fn=os.setpgrp)

    def forward(sig: int, _frame) -> None:
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if code < 0:  # killed by a signal: die of the same one
        sig = -code
        sys.stdout.flush()
        with contextlib.suppress(OSError):  # SIGKILL (the OOM killer's) has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig  # still here: a signal this process does not die of, as a shell reports it
    return code
