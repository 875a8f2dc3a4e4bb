"""One statistical test for every "is this faster?" ccoverlap answers: the bench's rows and the tuner's trials.

Step times come in groups: the steps of one run (a trial, a bench strategy's ranks). Runs differ from each
other (clocks, memory layout, other tenants) more than steps within a run do, so the bootstrap resamples
runs first and then steps within each resampled run (a two-level bootstrap), and compares medians: a
few slow steps (a garbage collection, a checkpoint) move a median little. The interval of the ratio
candidate / baseline decides: entirely below 1 is faster, entirely above 1 slower, otherwise within noise.
With one run per side only step-to-step noise is seen; the result says how many runs it rests on.
Pure Python and seeded: the same samples give the same interval.
"""
from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
RESAMPLES = 2000
FASTER, SLOWER, NOISE = "faster", "slower", "within noise"

Runs = Sequence[Sequence[float]]  # runs of step times (ms), each with at least one step


@dataclass(frozen=True)
class Comparison:
    """candidate / baseline, by the medians of their steps, with its bootstrap confidence interval."""

    ratio: float  # < 1: the candidate is faster
    lo: float
    hi: float
    confidence: float
    runs: tuple[int, int]  # (baseline, candidate)
    steps: tuple[int, int]

    @property
    def verdict(self) -> str:
        return FASTER if self.hi < 1 else SLOWER if self.lo > 1 else NOISE

    @property
    def speedup(self) -> float:
        """baseline / candidate: > 1 is faster."""
        return 1 / self.ratio

    def label(self) -> str:
        """'0.962x [0.951-0.973] faster': how tables show it."""
        return f"{self.ratio:.3f}x [{self.lo:.3f}-{self.hi:.3f}] {self.verdict}"

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "ci": [self.lo, self.hi], "confidence": self.confidence,
                "verdict": self.verdict, "runs": list(self.runs), "steps": list(self.steps)}

    @classmethod
    def from_dict(cls, d: dict) -> Comparison:
        """The inverse of to_dict: a comparison read back from results (JSON), to label it."""
        return cls(d["ratio"], *d["ci"], d["confidence"], tuple(d["runs"]), tuple(d["steps"]))


def pooled_median(runs: Runs) -> float:
    return statistics.median(x for run in runs for x in run)


def _resample(runs: Runs, rng: random.Random) -> float:
    return statistics.median([x for run in rng.choices(runs, k=len(runs)) for x in rng.choices(run, k=len(run))])


def compare(baseline: Runs, candidate: Runs, confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
            seed: int = 0) -> Comparison:
    """The ratio of the candidate's median step to the baseline's, and its two-level bootstrap interval."""
    for name, runs in (("baseline", baseline), ("candidate", candidate)):
        if not runs or any(len(run) == 0 for run in runs):
            raise ValueError(f"{name}: every run needs at least one step time")
        if any(not x > 0 for run in runs for x in run):
            raise ValueError(f"{name}: step times must be positive")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence}: valid between 0 and 1")
    rng = random.Random(seed)
    ratios = sorted(_resample(candidate, rng) / _resample(baseline, rng) for _ in range(resamples))
    tail = (1 - confidence) / 2
    lo = ratios[int(tail * (resamples - 1))]
    hi = ratios[int(round((1 - tail) * (resamples - 1)))]
    return Comparison(pooled_median(candidate) / pooled_median(baseline), lo, hi, confidence,
                      (len(baseline), len(candidate)),
                      (sum(map(len, baseline)), sum(map(len, candidate))))
