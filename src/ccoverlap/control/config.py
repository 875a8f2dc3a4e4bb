"""What `ccoverlap levers`, `interposer` and `run` take (a field with help is a CLI option: util/options.py)."""
from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass

from ccoverlap.control.interposer import FIELDS, POLICY_ENV, Field
from ccoverlap.util.errors import UsageError
from ccoverlap.util.options import JSON_HELP


@dataclass(frozen=True)
class LeversConfig:
    strategy: str | None = field(default=None, metadata={
        "metavar": "COMBO", "help": "check a combination and print the environment, interposer policy and start-up "
        "calls it sets"})
    json: str | None = field(default=None, metadata={"metavar": "PATH", "help": JSON_HELP})


@dataclass(frozen=True)
class InterposerConfig:
    path: bool = field(default=False, metadata={"help": "print only the library path"})


def option_help(f: Field) -> str:
    """The --help line of a policy field: what it does, its valid values and default, its variable."""
    default = f"default {f.default}" if f.default else ""
    return f"{f.help} ({'; '.join(filter(None, (f.valid, default, f.env)))})"


@dataclass(frozen=True)
class _RunOptions:
    """`ccoverlap run`'s own options; RunConfig adds one per field of the interposer's policy table."""

    policy: str | None = field(default=None, metadata={"metavar": "FILE", "help": f"JSON policy file ({POLICY_ENV})"})
    strategy: str | None = field(default=None, metadata={
        "metavar": "COMBO", "help": "apply a combination of levers, lever[=value]+... (`ccoverlap levers`): their "
        "variables, policy fields and start-up calls"})
    config: str | None = field(default=None, metadata={
        "metavar": "POLICY", "help": "apply a tuned policy file (`ccoverlap tune`): its levers and knobs, as the "
        "tuner ran them"})
    allow_env: tuple[str, ...] = field(default=(), metadata={
        "metavar": "NAME", "append": True, "shown": "none", "help": "with --config: let the file's knob set NAME "
        "although it is no tuning variable (docs/tune.md), e.g. one you tuned with `tune --env NAME=...`; repeatable"})

    def validate(self) -> _RunOptions:
        """A tuned policy file is a whole policy: not with --policy."""
        if self.policy is not None and self.config is not None:
            raise UsageError("--config and --policy: give one (a tuned policy file is a whole policy)")
        return self

    @property
    def given(self) -> dict[str, str]:
        """The policy fields given as options, by key."""
        return {f.key: v for f in FIELDS if (v := getattr(self, f.key)) is not None}


#: made from the C table (csrc/policy.c), so that a new policy field is an option of `ccoverlap run` at once
RunConfig = make_dataclass("RunConfig", [
    (f.key, str | None, field(default=None, metadata={"flag": f.option, "metavar": f.metavar, "help": option_help(f)}))
    for f in FIELDS], bases=(_RunOptions,), frozen=True)
