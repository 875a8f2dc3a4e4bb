"""Starting a user's command under a setting, and ending as it ended: its environment (the levers' variables,
the interposer's policy, LD_PRELOAD) and its supervision (its own process group, signals forwarded, the same exit).
`ccoverlap run`, the doctor and the tuner start their commands through here."""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys

from ccoverlap.control import levers, policy as tuned
from ccoverlap.control.interposer import BY_KEY, FIELDS, POLICY_ENV, Field, parse, preload_env
from ccoverlap.util.errors import UsageError

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def child_environ(args: argparse.Namespace, environ: dict[str, str]) -> dict[str, str]:
    """`environ` with the options applied and the library preloaded; UsageError if the policy is bad.
    Paths are made absolute: the command may change directory."""
    env = dict(environ)
    if args.policy is not None:
        env[POLICY_ENV] = os.path.abspath(args.policy)
    given = {f.key: v for f in FIELDS if (v := getattr(args, f.key)) is not None}
    if args.config is not None:
        if args.strategy is not None:
            raise UsageError("--config and --strategy: give one (a policy file names its own levers)")
        env |= config_environ(args.config, given, env)
    if args.strategy is not None:
        env |= strategy_environ(args.strategy, given, env)
    for field in FIELDS:
        value = getattr(args, field.key)
        if value is not None:
            env[field.env] = os.path.abspath(value) if field.kind == "path" else value
    parse(env)
    return env | preload_env(env)


def strategy_environ(text: str, given: dict[str, str], environ: dict[str, str], host: levers.Host | None = None) -> dict[str, str]:
    """The variables that apply strategy `text` to a program started with `environ`; `given`: the policy
    options on the command line (policy key -> value), which must agree with the strategy's. UsageError
    for a strategy that is bad, does not apply on `host` (this machine) or cannot be applied to a program."""
    s = levers.strategy(text)
    if s.no_overlap:
        raise UsageError(f"--strategy {s.name}: the bench's baseline (its workloads wait for each collective); "
                         "it cannot be applied to a program")
    return policy_environ(tuned.TunedPolicy.of(s), f"--strategy {s.name}", given, environ, host, whole_policy=False)


def config_environ(path: str, given: dict[str, str], environ: dict[str, str], host: levers.Host | None = None) -> dict[str, str]:
    """The variables that apply the tuned policy file at `path` as the tuner ran it (its whole interposer
    policy, so the caller's CCOVERLAP_* variables do not change it); `given` as for strategy_environ."""
    return policy_environ(tuned.load(path), f"--config {path}", given, environ, host, whole_policy=True)


def policy_environ(policy: tuned.TunedPolicy, source: str, given: dict[str, str], environ: dict[str, str],
                   host: levers.Host | None, whole_policy: bool) -> dict[str, str]:
    """The variables that apply `policy` (named `source` in errors) to a program started with `environ`;
    UsageError where one of its levers does not apply on `host` (this machine) or an option in `given`
    disagrees with one of its policy fields."""
    if reason := policy.not_applicable(host or levers.Host.detect()):
        raise UsageError(f"{source}: {reason}")
    for key, value in policy.policy.items():
        field = BY_KEY[key]
        if key in given and _normal(field, given[key]) != _normal(field, value):
            raise UsageError(f"{field.option} {given[key]} disagrees with {source}, which sets {key} {value}")
    return tuned.setting_environ(policy.setting(), environ, whole_policy=whole_policy)


def _normal(field: Field, value: str) -> int | str:
    """A policy value as the library compares it, so that 100 and 0100 agree (the whole policy is checked later)."""
    text = value.strip()
    return int(text) if field.kind.startswith("int") and text.isdigit() else text


def command(argv: list[str], example: str) -> list[str]:
    """The command after --; UsageError showing `example` where there is none."""
    cmd = argv[1:] if argv[:1] == ["--"] else argv
    if not cmd:
        raise UsageError(f"give the command to run after --, e.g. {example}")
    return cmd


def found(cmd: list[str], env: dict[str, str], then: str = "") -> None:
    """UsageError (`then` appended) where `cmd` is not a program on env's PATH."""
    if shutil.which(cmd[0], path=env.get("PATH")) is None:
        raise UsageError(f"command not found: {cmd[0]}{then}")


def supervise(cmd: list[str], env: dict[str, str]) -> int:
    """Run `cmd` in its own process group, forward termination signals to the whole group
    (torchrun and its workers), and end the way it ended: same exit code, or same signal."""
    return end_as(wait(cmd, env))


def wait(cmd: list[str], env: dict[str, str]) -> int:
    """Run `cmd` in its own process group, forwarding termination signals to the whole group, until it
    ends; its return code (-N: killed by signal N)."""
    child = subprocess.Popen(cmd, env=env, preexec_fn=os.setpgrp)

    def forward(sig: int, _frame) -> None:
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def end_as(code: int) -> int:
    """The exit code that ends this process as a command with return code `code` ended: the code itself,
    or, for -N, death by signal N (128 + N where this process does not die of it)."""
    if code < 0:  # killed by a signal: die of the same one
        sig = -code
        sys.stdout.flush()
        with contextlib.suppress(OSError):  # SIGKILL (the OOM killer's) has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig  # still here: a signal this process does not die of, as a shell reports it
    return code
