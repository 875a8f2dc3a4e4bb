"""One trial: the user's command, unmodified, under one candidate, timed through the doctor's capture.

The start-up hook installs the capture in every Python process of the command (as `ccoverlap doctor` does) in
its steps-only mode: each optimizer step's time goes to rank<r>_steps.jsonl (CUDA events on GPUs), and after
--skip + --steps steps every rank drains its GPU, writes the squared norms of its trained parameters (the
results guard) and ends. A doctor trial also profiles the timed steps, for the analysis that orders the search.
Everything a trial leaves (step records, trace, the interposer's stats, the command's output, trial.json) stays
in its own folder.

A trial starts the command with its policy's launch (control/launch.py: a whole policy, so the caller's
CCOVERLAP_* variables do not reach it) plus the capture, which is what `ccoverlap run --config` of the policy
file it leads to gives the command, the capture aside: the command runs as it was measured. Every trial, the
default's included, runs with the launch interposer preloaded (pass-through where the candidate sets no policy
field), as `run --config` runs it too, so every compared trial carries the same instrumentation; its stats (an
output, like the capture) say whether the candidate's levers left their mark (control/levers.py: Mark).
"""
from __future__ import annotations

import dataclasses
import math
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ccoverlap.control import launch, levers, procs, startup
from ccoverlap.control.interposer import LaunchStats
from ccoverlap.control.policy import TunedPolicy
from ccoverlap.doctor import record
from ccoverlap.doctor.config import CaptureConfig
from ccoverlap.util import timing
from ccoverlap.util.output import write_json

#: lines of the command's output a failed trial reports
TAIL_LINES = 12
OUTPUT = "output.log"
RECORD = "trial.json"


@dataclass
class Trial:
    index: int
    phase: str  # baseline, doctor, screen, combine, confirm
    policy: TunedPolicy
    status: str  # ok, failed, timeout
    samples: tuple[float, ...] = ()  # ms of each timed step, the slowest rank's
    fingerprints: dict[int, tuple[float, ...]] = field(default_factory=dict)  # rank -> squared parameter norms
    rounding: float | None = None  # the unit roundoff of the parameters' coarsest dtype, over the ranks
    wall_s: float = 0.0
    folder: Path | None = None
    error: str | None = None  # why it failed: the command's last lines, or what was missing
    gpu: bool = False  # samples are CUDA-event times
    drift: float | None = None  # relative change of the fingerprint against the default's first (search sets it)
    refused: str | None = None  # why its result is not the default's (search sets it)
    effect: dict[str, bool | None] = field(default_factory=dict)  # lever -> its mark present / absent / unknown

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def no_effect(self) -> list[str]:
        """The levers whose mark is absent from this trial's launches: they did nothing to them."""
        return [name for name, seen in self.effect.items() if seen is False]

    @property
    def timed(self) -> bool:
        """Its step times measure the candidate (a doctor trial's are under the profiler)."""
        return self.ok and self.phase != "doctor"

    def to_dict(self) -> dict:
        stats = timing.summary(self.samples) if self.samples else None
        return {"index": self.index, "phase": self.phase, "name": self.policy.name, "levers": dict(self.policy.levers),
                "knobs": dict(self.policy.knobs), "status": self.status, "error": self.error,
                "step_ms": stats, "samples_ms": list(self.samples), "clock": "cuda events" if self.gpu else "host",
                "drift": self.drift, "rounding": self.rounding, "refused": self.refused, "effect": self.effect,
                "wall_s": self.wall_s,
                "folder": str(self.folder) if self.folder else None}


def steps_of(records: list[record.RankRecord], skip: int, steps: int) -> tuple[tuple[float, ...], bool, str | None]:
    """(ms of each step skip+1..skip+steps, the slowest rank's; whether they are GPU times; what is missing)."""
    if not records:
        return (), False, "no Python process of the command stepped a torch.optim optimizer"
    lost, world = record.missing(records)
    if lost:  # the slowest rank may be the one not seen: no step time without every rank
        ranks = ", ".join(map(str, lost))
        return (), False, (f"rank(s) {ranks} of {world} left no step record in the trial's folder (a job across nodes "
                           "needs --out on a file system every node shares, at the same path)")
    per_rank = []
    for r in records:
        wanted = {s.step: s for s in r.steps if skip < s.step <= skip + steps}
        per_rank.append(wanted)
    gpu = all(s.gpu_ms is not None for ranks in per_rank for s in ranks.values())
    common = sorted(set.intersection(*(set(ranks) for ranks in per_rank)))
    if len(common) < steps:
        made = min(max((s.step for s in r.steps), default=0) for r in records)
        return (), gpu, (f"the program made {made} optimizer step(s) on its slowest rank; a trial needs "
                         f"--skip {skip} + --steps {steps} (lower them)")
    samples = tuple(max((ranks[n].gpu_ms if gpu else ranks[n].ms) for ranks in per_rank) for n in common)
    if not all(math.isfinite(x) and x > 0 for x in samples):
        return (), gpu, "a step time was not positive"
    return samples, gpu, None


def _why(path: Path) -> str:
    """What the command's output says about why it failed (procs.why_failed)."""
    try:
        return procs.why_failed(path.read_text(errors="replace"), TAIL_LINES)
    except OSError:
        return ""


@dataclass
class Runner:
    """Runs trials of `cmd`, each in a new folder under `out`."""

    cmd: list[str]
    base: Mapping[str, str]  # the environment the command would have had
    out: Path
    skip: int
    steps: int
    comm_regex: str | None = None  # communication kernels besides the built-in ones (model/comm.py)
    count: int = 0

    def policy(self, policy: TunedPolicy) -> TunedPolicy:
        """`policy` as a trial runs it and its file records it: with the communication regex the tuner was given."""
        return dataclasses.replace(policy, comm_regex=self.comm_regex)

    def launch(self, policy: TunedPolicy, folder: Path, profile: bool) -> launch.Launch:
        """The policy's launch (as `run --config` starts it) and the capture."""
        capture = CaptureConfig(steps=self.steps, skip=self.skip, seconds=0.0, skip_seconds=0.0, out=str(folder),
                                alone="on", profile=profile, stop=True, fingerprint=True).job()
        observe = {"stats": str(folder / record.STATS_NAME)} | ({"comm": self.comm_regex} if self.comm_regex else {})
        return self.policy(policy).launch(jobs={startup.DOCTOR_ENV: capture}, fields=observe)

    def __call__(self, policy: TunedPolicy, phase: str, timeout_s: float, profile: bool = False) -> Trial:
        """One trial; OSError where its folder cannot be written (a full disk), with the folder removed."""
        self.count += 1
        folder = self.out / f"trial{self.count:03d}-{_slug(policy.name)}"
        folder.mkdir(parents=True)
        try:
            trial = self._run(Trial(self.count, phase, policy, "failed", folder=folder), timeout_s, profile)
            write_json(folder / RECORD, trial.to_dict())  # where the disk is full, this says so
        except OSError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return trial

    def _run(self, trial: Trial, timeout_s: float, profile: bool) -> Trial:
        folder, code, started = trial.folder, None, time.monotonic()
        with (folder / OUTPUT).open("wb") as log, self.launch(trial.policy, folder, profile).start(
                self.cmd, self.base, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT) as child:
            try:
                code = child.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
            finally:  # a timeout, Ctrl-C, SIGTERM: the command and all it started go with the trial
                if code is None:
                    child.stop(signal.SIGTERM)
        trial.wall_s = time.monotonic() - started
        records, bad = record.read_all(folder)
        samples, gpu, missing = steps_of(records, self.skip, self.steps)
        if code is None:
            trial.status, trial.error = "timeout", f"stopped after {timeout_s:.0f} s"
        elif code != 0 and not (records and all(r.stopped for r in records)):
            trial.error = f"ended with {procs.ending(code)}" + (f": {t}" if (t := _why(folder / OUTPUT)) else "")
        elif bad or missing:
            trial.error = str(bad[0]) if bad else missing
        else:
            trial.status = "ok"
        trial.samples, trial.gpu = samples, gpu
        trial.fingerprints = {r.rank: r.fingerprint for r in records if r.fingerprint is not None}
        trial.rounding = max((r.rounding for r in records if r.rounding is not None), default=None)
        trial.effect = levers.took_effect(trial.policy.levers,
                                          LaunchStats.read(folder.glob(record.STATS_NAME.replace("%p", "*"))))
        return trial


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-=." else "_" for c in name)[:60]


def drift(a: Mapping[int, tuple[float, ...]], b: Mapping[int, tuple[float, ...]]) -> float:
    """The largest relative difference between two runs' squared parameter norms (inf where they do not match up:
    other ranks, other parameters)."""
    if not a or a.keys() != b.keys() or any(len(a[r]) != len(b[r]) for r in a):
        return math.inf
    worst = 0.0
    for r in a:
        for x, y in zip(a[r], b[r]):
            if x != y:
                worst = max(worst, abs(x - y) / max(abs(x), abs(y))
                            if math.isfinite(x) and math.isfinite(y) else math.inf)
    return worst

