"""Starting a command under a setting, the one way every tool does it: `ccoverlap run` (with --strategy or
--config too), the doctor, the tuner's trials and the bench's ranks each describe what they need as a
`Launch` and start the command with it; `ccoverlap.enable()` takes the half a running process can take.

A Launch's environment is the base (the caller's environment) with exactly what was asked for:
- the setting's variables (its levers' and knobs');
- where there are interposer policy fields (the setting's, or given: `run`'s options, the bench's stats), the
  interposer first on LD_PRELOAD and its policy, checked by the library's own parser (csrc/policy.c). A
  `whole` policy writes every field, empty where unset, so that the caller's CCOVERLAP_* variables and policy
  file do not change it (the tuner, the bench, `run --config`); otherwise the fields are layered over them
  (`run`, `run --strategy`). A whole launch without fields takes the interposer out of LD_PRELOAD;
- where there are start-up calls or other jobs (the doctor's capture), the start-up hook first on PYTHONPATH
  and each job's variable (control/startup.py); a whole launch drops the caller's job variables.
Nothing else: ccoverlap never sets a variable nobody asked for (the device scripts switch NVLink multicast off
on shared machines; the product does not). The command runs under its keeper (control/procs.py): its own
process group, ended with whatever it started when it ends or when ccoverlap dies.
"""
from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

from ccoverlap.control import interposer, levers, startup
from ccoverlap.control.procs import FORWARDED, Child
from ccoverlap.util.errors import UsageError


@dataclass(frozen=True)
class Launch:
    """What a command gets from ccoverlap (the module's docstring says how each part reaches it)."""

    setting: levers.Setting = field(default_factory=levers.Setting)
    # interposer policy fields beyond the setting's (policy key -> value)
    fields: Mapping[str, str] = field(default_factory=dict)
    whole: bool = True  # the interposer's whole policy, and no job the caller's environment asked for
    interposer: bool = False  # preload the interposer even without a field (plain `ccoverlap run`)
    # start-up hook jobs besides the setting's calls (startup.JOBS variable -> value)
    jobs: Mapping[str, object] = field(default_factory=dict)

    def policy(self) -> dict[str, str]:
        """The interposer's fields (policy key -> value; paths absolute: the command may change directory)."""
        given = {k: v for k, v in {**self.setting.policy, **self.fields}.items() if v is not None}
        return {k: os.path.abspath(v) if interposer.BY_KEY[k].kind == "path" else v for k, v in given.items()}

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """The command's whole environment; UsageError (the library's message) for a policy it would refuse."""
        env = {k: v for k, v in base.items() if not (self.whole and k in _OURS)}
        env |= self.setting.env
        if (fields := self.policy()) or self.interposer:
            blank = {f.env: "" for f in interposer.FIELDS} | {interposer.POLICY_ENV: ""} if self.whole else {}
            env |= blank | {interposer.BY_KEY[k].env: v for k, v in fields.items()}
            interposer.parse(env)
            env |= interposer.preload_env(env)
        elif self.whole:
            env = interposer.without_preload(env)
        jobs = ({startup.STARTUP_ENV: dict(self.setting.startup)} if self.setting.startup else {}) | dict(self.jobs)
        return env | (startup.environ(jobs, env) if jobs else {})

    def start(self, cmd: Sequence[str], base: Mapping[str, str] = os.environ, **io) -> Child:
        """`cmd` started with this environment under its keeper; `io`: stdin, stdout, stderr, cwd (procs.Child).
        UsageError, before anything starts, for a bad policy or a command not on PATH."""
        env = self.environ(base)
        found(cmd, env)
        return Child(cmd, env, **io)

    def run(self, cmd: Sequence[str], base: Mapping[str, str] = os.environ, received: list[int] | None = None) -> int:
        """Run `cmd` in the foreground: SIGINT, SIGTERM, SIGHUP and SIGQUIT to ccoverlap go on to it (torchrun
        tells its workers), and it runs until it ends; its return code (-N: killed by signal N). `received`
        gets each signal passed on, so a caller can say the run was interrupted."""

        def forward(sig, _frame) -> None:
            if received is not None:
                received.append(sig)
            child.send_signal(sig)

        with self.start(cmd, base) as child:
            previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
            try:
                return child.wait()
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)


#: the variables a whole launch does not take from the caller: the interposer's, and the hook's jobs'
_OURS = frozenset({f.env for f in interposer.FIELDS} | {interposer.POLICY_ENV} | set(startup.JOBS))


def in_process(setting: levers.Setting, environ: MutableMapping[str, str] = os.environ) -> None:
    """The half of a launch a running process can take: the setting's variables into `environ` (read by what
    starts later: NCCL's communicators, torch's process groups) and its start-up calls, made now."""
    environ.update(setting.env)
    if setting.startup:
        startup.call(setting.startup, environ)


def command(argv: list[str], example: str) -> list[str]:
    """The command after --; UsageError showing `example` where there is none."""
    cmd = argv[1:] if argv[:1] == ["--"] else argv
    if not cmd:
        raise UsageError(f"give the command to run after --, e.g. {example}")
    return cmd


def found(cmd: Sequence[str], env: Mapping[str, str], then: str = "") -> None:
    """UsageError (`then` appended) where `cmd` is not a program on env's PATH."""
    if shutil.which(cmd[0], path=env.get("PATH")) is None:
        raise UsageError(f"command not found: {cmd[0]}{then}")
