"""`ccoverlap run`: run a command (and its children) with the launch interposer preloaded."""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys

from ccoverlap.errors import UsageError
from ccoverlap.interposer import ENV, POLICY_ENV, Policy, library_path

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

# option -> policy field
_OPTIONS = {
    "policy": None, "mode": "mode", "pad_bytes": "pad_bytes", "blocks": "blocks", "per_sm": "comm_per_sm",
    "drain": "drain", "gate": "gate", "keep": "keep", "include": "include", "exclude": "exclude", "comm": "comm",
    "stats": "stats",
}
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
    p.add_argument("--policy", metavar="FILE", help="JSON policy file (CCOVERLAP_POLICY)")
    p.add_argument("--mode", metavar="MODE", help="off, pad, blocks or auto (CCOVERLAP_MODE)")
    p.add_argument("--pad-bytes", metavar="N", help="pad every compute launch by N bytes (CCOVERLAP_PAD_BYTES)")
    p.add_argument("--blocks", metavar="N", help="pad to at most N compute blocks per SM (CCOVERLAP_BLOCKS)")
    p.add_argument("--per-sm", metavar="K", help="auto: comm CTAs to fit per SM, default 1 (CCOVERLAP_COMM_PER_SM)")
    p.add_argument("--drain", metavar="N|auto",
                   help="auto: compute blocks per SM that may retire before comm fits; default auto: 1 for grids of "
                   "two waves or more, else 0 (CCOVERLAP_DRAIN)")
    p.add_argument("--gate", metavar="GATE",
                   help="comm: pad only while a comm kernel is in flight (default in auto), always (CCOVERLAP_GATE)")
    p.add_argument("--keep", metavar="N",
                   help="auto: skip a pad that leaves fewer than N%% of a kernel's blocks per SM, 0..100, default 50; "
                   "0: no cap (CCOVERLAP_KEEP)")
    p.add_argument("--include", metavar="REGEX", help="pad only kernels whose name matches (CCOVERLAP_INCLUDE)")
    p.add_argument("--exclude", metavar="REGEX", help="never pad kernels whose name matches (CCOVERLAP_EXCLUDE)")
    p.add_argument("--comm", metavar="REGEX", help="more communication kernels, never padded (CCOVERLAP_COMM)")
    p.add_argument("--stats", metavar="PATH", help="write launch stats JSON at exit; %%p is the pid (CCOVERLAP_STATS)")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run")
    p.set_defaults(run=run)


def child_environ(args: argparse.Namespace, environ: dict[str, str]) -> dict[str, str]:
    """`environ` with the options applied and the library preloaded; UsageError if the policy is bad."""
    env = dict(environ)
    for option, field in _OPTIONS.items():
        value = getattr(args, option)
        if value is not None:
            if option in ("policy", "stats"):  # the command may change directory
                value = os.path.abspath(value)
            env[ENV[field] if field else POLICY_ENV] = value
    Policy.from_environ(env)
    lib = library_path()
    preload = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p != lib]
    env["LD_PRELOAD"] = " ".join([lib, *preload])
    return env


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
        sys.stdout.flush()
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code
