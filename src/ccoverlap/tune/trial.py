"""One trial: the user's command, unmodified, under one candidate, timed through the doctor's capture.

The start-up hook installs the capture in every Python process of the command (as `ccoverlap doctor` does) in
its steps-only mode: each optimizer step's time goes to rank<r>_steps.jsonl (CUDA events on GPUs), and after
--skip + --steps steps every rank drains its GPU, writes the squared norms of its trained parameters (the
results guard) and ends. A doctor trial also profiles the timed steps, for the analysis that orders the search.
Everything a trial leaves (step records, trace, the command's output) stays in its own folder.
"""
from __future__ import annotations

import math
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ccoverlap.control import procs, startup
from ccoverlap.util import timing
from ccoverlap.bench.comms import MULTICAST_OFF
from ccoverlap.doctor import record
from ccoverlap.doctor.config import DoctorConfig
from ccoverlap.control.policy import TunedPolicy

#: lines of the command's output a failed trial reports
TAIL_LINES = 12
OUTPUT = "output.log"


@dataclass
class Trial:
    index: int
    phase: str  # baseline, doctor, screen, combine, confirm
    policy: TunedPolicy
    status: str  # ok, failed, timeout
    samples: tuple[float, ...] = ()  # ms of each timed step, the slowest rank's
    fingerprints: dict[int, tuple[float, ...]] = field(default_factory=dict)  # rank -> squared parameter norms
    wall_s: float = 0.0
    folder: Path | None = None
    error: str | None = None  # why it failed: the command's last lines, or what was missing
    gpu: bool = False  # samples are CUDA-event times
    drift: float | None = None  # relative change of the fingerprint against the default's first (search sets it)
    refused: str | None = None  # why its result is not the default's (search sets it)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def timed(self) -> bool:
        """Its step times measure the candidate (a doctor trial's are under the profiler)."""
        return self.ok and self.phase != "doctor"

    def to_dict(self) -> dict:
        stats = timing.summary(self.samples) if self.samples else None
        return {"index": self.index, "phase": self.phase, "name": self.policy.name, "levers": dict(self.policy.levers),
                "knobs": dict(self.policy.knobs), "status": self.status, "error": self.error,
                "step_ms": stats, "samples_ms": list(self.samples), "clock": "cuda events" if self.gpu else "host",
                "drift": self.drift, "refused": self.refused, "wall_s": self.wall_s,
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


def _tail(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return "\n".join(lines[-TAIL_LINES:])


@dataclass
class Runner:
    """Runs trials of `cmd`, each in a new folder under `out`."""

    cmd: list[str]
    base: Mapping[str, str]  # the environment the command would have had
    out: Path
    skip: int
    steps: int
    comm_kernels: str | None = None  # for the interposer: communication kernels besides NCCL's
    count: int = 0

    def environ(self, policy: TunedPolicy, folder: Path, profile: bool) -> dict[str, str]:
        capture = DoctorConfig(steps=self.steps, skip=self.skip, out=str(folder), profile=profile, stop=True,
                               fingerprint=True).capture()
        env = dict(self.base) | MULTICAST_OFF | policy.environ(self.base, self.comm_kernels,
                                                                 str(folder / "interposer-%p.json"))
        return env | startup.hook_environ(startup.DOCTOR_ENV, capture, env)

    def __call__(self, policy: TunedPolicy, phase: str, timeout_s: float, profile: bool = False) -> Trial:
        self.count += 1
        folder = self.out / f"trial{self.count:03d}-{_slug(policy.name)}"
        folder.mkdir(parents=True)
        trial = Trial(self.count, phase, policy, "failed", folder=folder)
        started = time.monotonic()
        with (folder / OUTPUT).open("wb") as log:
            child = subprocess.Popen(self.cmd, env=self.environ(policy, folder, profile), stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=procs.die_with_parent)
            try:
                code = child.wait(timeout_s)
            except subprocess.TimeoutExpired:
                code = None
            finally:  # a timeout, Ctrl-C, SIGTERM: the command's whole group goes with the trial
                procs.stop([child], signal.SIGTERM)
        trial.wall_s = time.monotonic() - started
        records, bad = record.read_all(folder)
        samples, gpu, missing = steps_of(records, self.skip, self.steps)
        if code is None:
            trial.status, trial.error = "timeout", f"stopped after {timeout_s:.0f} s (--trial-timeout)"
        elif code != 0 and not (records and all(r.stopped for r in records)):
            trial.error = f"ended with {procs.ending(code)}" + (f": {t}" if (t := _tail(folder / OUTPUT)) else "")
        elif bad or missing:
            trial.error = str(bad[0]) if bad else missing
        else:
            trial.status = "ok"
        trial.samples, trial.gpu = samples, gpu
        trial.fingerprints = {r.rank: r.fingerprint for r in records if r.fingerprint is not None}
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
                worst = max(worst, abs(x - y) / max(abs(x), abs(y)) if math.isfinite(x) and math.isfinite(y) else math.inf)
    return worst

