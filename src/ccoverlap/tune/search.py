"""The tuner's procedure, over trials it is handed a function to run (so it is tested with fake trials).

1. Baseline: the default twice. A command that fails under the default stops the tuning at once, with its
   error; a budget that cannot hold a few trials of it is bad input, saying what it needs. The two runs give
   the program's own run-to-run change of its trained parameters: the results guard's tolerance.
2. The doctor (on GPUs): one profiled run of the default. Its recommendations order the arms; where it saw no
   communication, or scheduling headroom below recommend.NOTHING_TO_GAIN_PCT, no scheduling lever can gain
   and the registry's arms are not tried (unless --levers named them); the user's knobs still are.
3. Screening by successive halving: every arm runs once (a default run every few arms, so drift shows in the
   baseline), the better half of those not slower goes on to run again, for up to ROUNDS rounds. An arm whose
   levers left no mark in its launches (control/levers.py: Mark; NCCL ignoring a knob, a pad with nothing to
   pad) is "no effect": its timing can only be noise, so it is neither run again, combined nor confirmed.
4. Combination: arms that each helped are added one at a time to the best so far, kept where the
   combination is faster than the best so far beyond the noise.
5. Confirmation: the best against the default, alternating, until the interval of the ratio of medians
   (stats.compare, two-level bootstrap over runs and steps) excludes 1 or the budget is spent.
A setting is kept only if it is faster beyond the noise and its result is the default's within tolerance;
otherwise the default stays and the outcome says why. Ctrl-C or SIGTERM ends the search with what it has.
"""
from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ccoverlap.util import stats
from ccoverlap.analysis import NOTHING_TO_GAIN_PCT
from ccoverlap.util.errors import UsageError
from ccoverlap.control.procs import Stopped
from ccoverlap.tune import space
from ccoverlap.tune.config import TuneConfig
from ccoverlap.tune.trial import Trial, drift
from ccoverlap.control.policy import TunedPolicy

ROUNDS = 3  # successive-halving rounds at most
INTERLEAVE = 4  # a default run after every this many arm runs
CONFIRM_RUNS = 3  # runs of the best and of the default before a verdict counts
MIN_TRIALS = 2 + 1 + CONFIRM_RUNS  # a budget must hold the baseline, one candidate and its confirmation
MAX_CONFIRM_RUNS = 8
AUTO_TIMEOUT = (3.0, 60.0)  # --trial-timeout 0: this many times the first run, at least this many seconds
MARGIN = 1.25  # a trial is started only if this many times the typical trial still fits
#: the results guard's tolerance: this many times the largest change seen between the default's own runs (a few
#: runs see only part of a nondeterministic program's spread: on one H200 a DDP step's flash-attention backward
#: moved the parameters' norms by 1.4e-4 in one default run of three, and 2.2e-4 in a run of a lever that changes
#: no arithmetic); 0 stays 0: a bitwise-reproducible program accepts no change at all
RUN_TO_RUN_MARGIN = 3.0
#: and never below this many units of the parameters' rounding (their coarsest dtype's unit roundoff): a setting that
#: only reorders sums (another thread count, another reduction order) moves each parameter by a few units, and a
#: squared norm by at most twice its elements' relative change
ROUNDING_UNITS = 8.0

RunTrial = Callable[[TunedPolicy, str, float, bool], Trial]  # (policy, phase, timeout s, profile) -> trial


@dataclass(frozen=True)
class Advice:
    """What the doctor's run of the default says, as far as the search needs it."""

    comm_seen: bool
    headroom_ms: float
    headroom_pct: float | None
    recommended: tuple[str, ...]  # strategy terms, best first
    line: str
    lever_headroom_pct: float | None = None  # what the doctor's levers reach together, a share of the step
    predicted: dict[str, float] | None = None  # strategy -> the what-if simulator's gain (share of the step)
    unpredicted: str | None = None  # why there are no predictions (the what-if refused the capture), or None

    def to_dict(self) -> dict:
        return {"comm_seen": self.comm_seen, "headroom_ms": self.headroom_ms, "headroom_pct": self.headroom_pct,
                "lever_headroom_pct": self.lever_headroom_pct, "recommended": list(self.recommended),
                "verdict": self.line, "predicted_gain": self.predicted, "no_prediction": self.unpredicted}


class CommandFailed(Exception):
    """The command failed under the default: nothing can be tuned."""

    def __init__(self, trial: Trial):
        super().__init__(trial.error or trial.status)
        self.trial = trial


@dataclass
class Outcome:
    trials: list[Trial]
    best: TunedPolicy  # space.DEFAULT where the default is kept
    kept: bool
    reason: str
    comparison: stats.Comparison | None  # best against the default (None: nothing was compared)
    comparisons: dict[str, stats.Comparison]  # every setting with timed runs against the default
    advice: Advice | None
    skipped: dict[str, str]  # lever -> why not tried
    tolerance: float
    interrupted: int | None = None  # the signal that ended the search early

    @property
    def speedup(self) -> float:
        return self.comparison.speedup if self.kept and self.comparison else 1.0

    def recovered(self) -> float | None:
        """The share of the headroom the doctor's levers reach (else its whole headroom; a share of the step)
        the kept setting recovered."""
        pct = self.advice and (self.advice.lever_headroom_pct or self.advice.headroom_pct)
        if not pct:
            return None
        return (1 - self.comparison.ratio) / (pct / 100) if self.kept else 0.0


def runs(trials: Sequence[Trial], policy: TunedPolicy) -> list[tuple[float, ...]]:
    return [t.samples for t in trials if t.timed and t.policy == policy]


@dataclass
class Search:
    run_trial: RunTrial
    arms: Sequence[TunedPolicy]
    cfg: TuneConfig
    doctor: Callable[[Trial], Advice | None] | None = None  # None: no doctor run (no GPU)
    skipped: dict[str, str] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    trials: list[Trial] = field(default_factory=list)
    advice: Advice | None = None
    on_trial: Callable[[Trial], None] = lambda _t: None  # progress: called after every trial

    def __post_init__(self):
        self.started = self.clock()
        self.budget_s = self.cfg.budget * 60
        self.typical_s = 0.0
        self.timeout_s = self.cfg.trial_timeout or self.budget_s  # auto: sized after the first trial
        self.run_to_run = 0.0  # the largest drift between the default's own runs
        self.since_default = 0
        self.choice: TunedPolicy | None = None  # the setting the search settled on so far
        self.helpers: list[TunedPolicy] = []

    # -- the budget ------------------------------------------------------------------------------------

    def left(self) -> float:
        return self.budget_s - (self.clock() - self.started)

    def fits(self, trials: float = 1, reserve: float = 0) -> bool:
        return self.left() - reserve * self.typical_s >= trials * self.typical_s * MARGIN

    # -- trials ----------------------------------------------------------------------------------------

    def trial(self, policy: TunedPolicy, phase: str, profile: bool = False) -> Trial:
        t = self.run_trial(policy, phase, min(self.timeout_s, max(self.left(), 1.0)), profile)
        self.trials.append(t)
        self.judge(t)
        self.on_trial(t)
        if policy == space.DEFAULT:
            self.since_default = 0
        else:
            self.since_default += 1
        return t

    @property
    def floor(self) -> float:
        """The parameters' rounding, in the guard's units (0 where the records do not say it)."""
        ref = self.reference()
        return ROUNDING_UNITS * (ref.rounding or 0.0) if ref else 0.0

    @property
    def tolerance(self) -> float:
        """The relative change of the fingerprint taken as the same result: --result-rtol on top of the larger of
        the default's own run-to-run change (with its margin) and the parameters' rounding."""
        return self.cfg.result_rtol + max(RUN_TO_RUN_MARGIN * self.run_to_run, self.floor)

    def reference(self) -> Trial | None:
        return next((t for t in self.trials if t.ok and t.policy == space.DEFAULT and t.fingerprints), None)

    def judge(self, t: Trial) -> None:
        """The results guard: its fingerprint against the default's first; a default run widens the tolerance."""
        ref = self.reference()
        if not t.ok or ref is None or not t.fingerprints:
            return
        t.drift = drift(ref.fingerprints, t.fingerprints)
        if t.policy == space.DEFAULT:
            self.run_to_run = max(self.run_to_run, t.drift)

    def refused(self, policy: TunedPolicy) -> str | None:
        """Why `policy`'s result is not the default's, or None (judged against the tolerance as it is now)."""
        worst = max((t.drift for t in self.trials if t.policy == policy and t.ok and t.drift is not None), default=None)
        if worst is None or worst <= self.tolerance:
            return None
        return (f"changed the result: trained parameters' norms differ by {worst:.2e} (relative), beyond the "
                f"tolerance {self.tolerance:.2e} (the default's own run-to-run change x{RUN_TO_RUN_MARGIN:g}: "
                f"{RUN_TO_RUN_MARGIN * self.run_to_run:.2e}; the parameters' rounding x{ROUNDING_UNITS:g}: "
                f"{self.floor:.2e}; --result-rtol {self.cfg.result_rtol:g} on top: --result-rtol R widens it)")

    def compare(self, policy: TunedPolicy) -> stats.Comparison | None:
        base, mine = runs(self.trials, space.DEFAULT), runs(self.trials, policy)
        return stats.compare(base, mine) if base and mine else None

    def failed(self, policy: TunedPolicy) -> bool:
        return any(t.policy == policy and not t.ok for t in self.trials)

    def no_effect(self, policy: TunedPolicy) -> bool:
        """A lever of `policy` left no mark in a run of it: it did nothing to the program's launches."""
        return any(t.policy == policy and t.no_effect for t in self.trials)

    def interleave(self) -> None:
        if self.since_default >= INTERLEAVE and self.fits():
            self.trial(space.DEFAULT, "baseline")

    # -- the procedure ---------------------------------------------------------------------------------

    def run(self) -> Outcome:
        interrupted: int | None = None
        try:
            arms = self.baseline()
            self.choice = self.screen(arms) if arms else None
            if self.choice is not None:
                self.choice = self.combine(self.choice)
                self.confirm(self.choice)
        except Stopped as stop:
            interrupted = stop.signum
        except KeyboardInterrupt:
            interrupted = signal.SIGINT
        return self.outcome(interrupted)

    def baseline(self) -> list[TunedPolicy]:
        limit = min(self.timeout_s, self.left())  # what will stop the first trial: --trial-timeout or the budget
        first = self.trial(space.DEFAULT, "baseline")
        if first.status == "timeout":
            steps = f"--skip {self.cfg.skip} + --steps {self.cfg.steps} optimizer steps"
            if self.cfg.trial_timeout and self.cfg.trial_timeout <= limit:
                raise UsageError(f"--trial-timeout {self.cfg.trial_timeout:g} s: the command ran that long under the "
                                 f"default without making {steps} (give a larger --trial-timeout, or fewer steps)")
            raise UsageError(f"--budget {self.cfg.budget:g} min is too small for one trial: the command ran "
                             f"{first.wall_s / 60:.1f} min under the default without making {steps} (give a larger "
                             "--budget, or fewer steps)")
        if not first.ok:
            raise CommandFailed(first)
        self.typical_s = first.wall_s
        self.timeout_s = self.cfg.trial_timeout or max(AUTO_TIMEOUT[0] * first.wall_s, AUTO_TIMEOUT[1])
        needed = (self.clock() - self.started) * MIN_TRIALS * MARGIN
        if needed > self.budget_s:
            raise UsageError(f"--budget {self.cfg.budget:g} min is too small: one trial of this command takes "
                             f"{first.wall_s:.0f} s and tuning needs at least {MIN_TRIALS} "
                             f"(--budget {math.ceil(needed / 60 * 2) / 2:g})")
        self.trial(space.DEFAULT, "baseline")
        arms = list(self.arms)
        if arms and self.doctor is not None and self.fits(1, reserve=1 + CONFIRM_RUNS):
            self.advice = self.doctor(self.trial(space.DEFAULT, "doctor", profile=True))
        if self.advice is not None:
            arms = space.ordered(arms, self.advice.recommended)
            why = None if self.cfg.levers else self._nothing_to_gain(self.advice)
            if why:
                for arm in arms:
                    for name, _ in arm.levers:
                        self.skipped.setdefault(name, why)
                arms = [a for a in arms if not a.levers]
            elif self.advice.predicted:
                arms, pruned = space.by_prediction(arms, self.advice.predicted, NOTHING_TO_GAIN_PCT / 100,
                                                   self.advice.recommended)
                if not self.cfg.levers:
                    for name, reason in pruned.items():
                        self.skipped.setdefault(name, reason)
                else:  # levers the user chose are tried, in the predicted order
                    arms += [a for a in self.arms if space.arm_strategy(a) in pruned]
        return arms

    @staticmethod
    def _nothing_to_gain(advice: Advice) -> str | None:
        if not advice.comm_seen:
            return "the doctor saw no communication kernel: no lever has anything to overlap"
        if advice.headroom_pct is not None and advice.headroom_pct < NOTHING_TO_GAIN_PCT and not advice.recommended:
            # (a lever the doctor names where only some typical steps gain is tried: recommend._disagree)
            return (f"the doctor measured {advice.headroom_pct:.1f}% scheduling headroom (< {NOTHING_TO_GAIN_PCT:g}%): "
                    "no scheduling lever can gain more")
        return None

    def screen(self, arms: list[TunedPolicy]) -> TunedPolicy | None:
        """Successive halving; the arms still standing, best first, are returned by their first."""
        alive = list(arms)
        for rnd in range(ROUNDS):
            for arm in alive:
                if not self.fits(1, reserve=CONFIRM_RUNS):
                    break
                self.trial(arm, "screen")
                self.interleave()
            ranked = self.helping(alive)  # arms that left no mark are out: their timing is noise
            half = math.ceil(len(ranked) / 2)
            if len(ranked) <= 1 or not self.fits(half, reserve=CONFIRM_RUNS):
                break
            alive = ranked[: max(2, half) if rnd == 0 else half]
        self.helpers = self.helping(arms)
        return self.helpers[0] if self.helpers else None

    def helping(self, arms: Sequence[TunedPolicy]) -> list[TunedPolicy]:
        """The arms that ran, kept their result, and are not slower than the default, fastest first."""
        scored = []
        for arm in arms:
            c = self.compare(arm)
            if (c is None or self.failed(arm) or self.refused(arm) or self.no_effect(arm) or c.ratio >= 1
                    or c.verdict == stats.SLOWER):
                continue
            scored.append((c.ratio, arm))
        return [arm for _, arm in sorted(scored, key=lambda e: e[0])]

    def combine(self, best: TunedPolicy) -> TunedPolicy:
        for arm in self.helpers[1:]:
            combo = space.combine(best, arm)
            if combo is None or not self.fits(2, reserve=CONFIRM_RUNS):
                continue
            for _ in range(2):
                self.trial(combo, "combine")
            self.interleave()
            mine, theirs = runs(self.trials, combo), runs(self.trials, best)
            if (mine and theirs and not self.failed(combo) and not self.refused(combo) and not self.no_effect(combo)
                    and stats.compare(theirs, mine).verdict == stats.FASTER):  # beats the best beyond the noise
                best = combo
        return best

    def confirm(self, best: TunedPolicy) -> None:
        while self.fits(1):
            n_best, n_base = len(runs(self.trials, best)), len(runs(self.trials, space.DEFAULT))
            c = self.compare(best)
            settled = c is not None and c.verdict != stats.NOISE
            if (n_best >= CONFIRM_RUNS and n_base >= CONFIRM_RUNS and settled) or n_best >= MAX_CONFIRM_RUNS:
                return
            if self.failed(best) or self.refused(best):
                return
            self.trial(best if n_best <= n_base else space.DEFAULT, "confirm")

    # -- the verdict -----------------------------------------------------------------------------------

    def outcome(self, interrupted: int | None) -> Outcome:
        tried = list(dict.fromkeys(t.policy for t in self.trials if t.policy != space.DEFAULT))
        comparisons = {p.name: c for p in tried if (c := self.compare(p)) is not None}
        for t in self.trials:
            t.refused = self.refused(t.policy)
        winners = [p for p in tried if (c := comparisons.get(p.name)) and c.verdict == stats.FASTER
                   and not self.failed(p) and not self.refused(p) and not self.no_effect(p)]
        # the setting the search settled on; cut short before it settled, the fastest winner so far
        best = self.choice if self.choice in winners else None if self.choice is not None and not interrupted \
            else min(winners, key=lambda p: comparisons[p.name].ratio, default=None)
        stop = f"interrupted by {signal.Signals(interrupted).name}" if interrupted else None
        if best is not None:
            c = comparisons[best.name]
            return Outcome(self.trials, best, True,
                           _so_far(f"{best.name} is faster than the default beyond the noise: {c.label()}", stop), c,
                           comparisons, self.advice, self.skipped, self.tolerance, interrupted)
        return Outcome(self.trials, space.DEFAULT, False, self._why_default(tried, comparisons, stop), None,
                       comparisons, self.advice, self.skipped, self.tolerance, interrupted)

    def _why_default(self, tried: list[TunedPolicy], comparisons: dict[str, stats.Comparison],
                     stop: str | None) -> str:
        """Why the default is kept; `stop`: how the search was interrupted, said in the reason (None: it was not)."""
        if not tried:
            if self.advice and (why := self._nothing_to_gain(self.advice)):
                return f"default kept: nothing to try ({why})"
            if self.skipped and not self.arms:
                why = "; ".join(f"{name}: {reason}" for name, reason in self.skipped.items())
                return f"default kept: no lever applies here ({why})"
            if self.arms and stop:
                return f"default kept: {stop} before any candidate ran"
            return "default kept: no candidate fitted in the budget" if self.arms else "default kept: nothing to try"
        best = min(comparisons.items(), key=lambda e: e[1].ratio, default=None)
        if best is None:
            return _so_far("default kept: every candidate failed", stop)
        name, c = best
        p = next((p for p in tried if p.name == name), None)
        extra = f"; {name} changed the result" if p and self.refused(p) else \
            f"; {name} left no mark (no effect)" if p and self.no_effect(p) else ""
        return _so_far(f"default kept: nothing was faster beyond the noise (closest: {name} {c.label()}{extra})", stop)


def _so_far(reason: str, stop: str | None) -> str:
    """`reason`, saying where the search was interrupted that it stands on the trials run so far."""
    return f"{reason}; {stop}: on the trials run so far" if stop else reason
