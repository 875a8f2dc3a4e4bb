"""What `ccoverlap tune` does, validated before the command first runs (importable without torch)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ccoverlap.control import levers
from ccoverlap.model import comm
from ccoverlap.util.errors import UsageError, check_range

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ORDERS = ("doctor", "registry")  # --order: the doctor's advice, or none (the baseline that measures what it saves)


def _levers(names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        levers.lever(name)  # unknown: one line naming the valid ones
    return names


def knob(text: str) -> tuple[str, tuple[str, ...]]:
    """`NAME=V1,V2,...` -> (NAME, values); UsageError naming what is malformed."""
    name, eq, values = text.partition("=")
    items = tuple(v.strip() for v in values.split(","))
    if not eq or not _NAME.fullmatch(name.strip()) or not values.strip() or not all(items):
        raise UsageError(f"--env {text!r}: write NAME=V1,V2,... (an environment variable and the values to try, "
                         "e.g. --env NCCL_ALGO=Ring,Tree)")
    if any("\0" in v or "\n" in v for v in items):
        raise UsageError(f"--env {name}: values cannot hold NUL or newlines")
    if len(set(items)) != len(items):
        raise UsageError(f"--env {name}: a value is named twice")
    return name.strip(), items


def _knobs(texts: tuple[str, ...]) -> tuple[str, ...]:
    names = [knob(t)[0] for t in texts]
    if dup := next((n for n in names if names.count(n) > 1), None):
        raise UsageError(f"--env {dup} is given twice: list all its values in one --env {dup}=V1,V2")
    return texts


@dataclass(frozen=True)
class TuneConfig:
    """The defaults are the CLI's; every field with help is an option (util/options.py)."""

    budget: float = field(default=10.0, metadata={
        "metavar": "MIN", "help": "minutes for the whole tuning, every trial included; the search stops starting "
        "trials when the next would not fit, and the confirmation gets its share"})
    steps: int = field(default=20, metadata={
        "metavar": "N", "help": "optimizer steps timed per trial (CUDA events on GPUs); the program is ended "
        "after them"})
    skip: int = field(default=10, metadata={
        "metavar": "K", "help": "optimizer steps run first in every trial and dropped (warm-up: compilation, "
        "allocator, NCCL set-up)"})
    levers: tuple[str, ...] = field(default=(), metadata={
        "metavar": "A,B", "help": "only these levers (`ccoverlap levers`); given, the doctor orders them but never "
        "prunes them", "parse": _levers, "shown": "every lever that applies here"})
    env: tuple[str, ...] = field(default=(), metadata={
        "metavar": "NAME=V1,V2", "help": "an environment variable and the values to try, besides the levers "
        "(repeatable), e.g. --env NCCL_ALGO=Ring,Tree", "append": True, "parse": _knobs, "shown": "none"})
    trial_timeout: float = field(default=0.0, metadata={
        "metavar": "S", "help": "seconds one trial may run before it is stopped and marked failed (0: three times the "
        "first trial of the default, at least 60)"})
    result_rtol: float = field(default=0.0, metadata={
        "metavar": "R", "help": "relative change of the trained parameters' norms accepted as the same result, on "
        "top of the program's own run-to-run change measured under the default (0: that alone)"})
    out: str | None = field(default=None, metadata={
        "metavar": "DIR", "help": "folder for every trial's record (step times, output) and, unless given "
        "elsewhere, tune.json, tune.png and policy.json; new or empty", "shown": "./ccoverlap-tune-<date>-<time>"})
    json: str | None = field(default=None, metadata={
        "metavar": "PATH", "help": "the result as JSON", "shown": "DIR/tune.json"})
    policy_out: str | None = field(default=None, metadata={
        "metavar": "PATH", "help": "the tuned policy file, for `ccoverlap run --config` and ccoverlap.enable()",
        "shown": "DIR/policy.json"})
    order: str = field(default="doctor", metadata={
        "metavar": "HOW", "help": "how candidates are chosen and ordered: doctor (on GPUs, one profiled run of the "
        "default: its recommendations first, levers it sees no headroom for and those the what-if predicts no gain "
        "for are skipped) or registry (every candidate in `ccoverlap levers` order, none skipped, no profiled run: "
        "what the doctor saves is the difference)"})
    comm_regex: str | None = field(default=None, metadata={
        "metavar": "RE", "help": "also treat kernels whose name matches RE (POSIX extended) as communication, "
        "besides NCCL's and RCCL's: in the doctor's analysis, never padded by the interposer; recorded in the policy"})

    def validate(self) -> TuneConfig:
        if not 0.5 <= self.budget <= 7 * 24 * 60:
            raise UsageError(f"--budget {self.budget:g}: valid 0.5..10080 minutes")
        check_range("--steps", self.steps, 3, 100000)
        check_range("--skip", self.skip, 1, 100000)
        if not (self.trial_timeout == 0 or 1 <= self.trial_timeout <= 86400):
            raise UsageError(f"--trial-timeout {self.trial_timeout:g}: valid 0 (auto) or 1..86400 seconds")
        if not 0 <= self.result_rtol <= 1:
            raise UsageError(f"--result-rtol {self.result_rtol:g}: valid 0..1")
        if self.order not in ORDERS:
            raise UsageError(f"--order {self.order!r}: valid {' or '.join(ORDERS)}")
        _levers(self.levers)
        _knobs(self.env)
        comm.check(self.comm_regex)
        return self

    @property
    def knobs(self) -> dict[str, tuple[str, ...]]:
        return dict(knob(t) for t in self.env)
