"""Is the capture reproduced? The simulated default against what was measured, before any lever is predicted.

A lever's predicted ratio means something only where the simulator reproduces the step the program ran. The
rule (docs/whatif.md, "Anchoring and refusal"), over the capture's typical steps (analysis/steps.py):

* the step: the median simulated default within STEP_TOLERANCE of the median measured step span;
* the collectives: each collective's start from its step's start (the n-th collective of the step, the median
  over the typical steps) within max(START_SHARE of the measured step, START_FLOOR_US) of its measured start.

Before that, each launch the simulated default slows beyond what its capture shows is held to the pace the capture
shows (`hold`; duration.py, "held"): the capture bounds how much it slows, as it bounds a launch's memory share.

Where either fails the capture is refused: no lever is predicted (`Validation.refused` says why, naming the
first collectives that disagree and the first launch whose end is off by the collectives' tolerance). Where both
hold, a prediction is anchored: the measured step times the simulated lever over the simulated default
(`Validation.anchor`), so the simulator's own error in the default's absolute time does not reach the figure.
The thresholds are stated, not fitted: 5% is the doctor's own "nothing to gain" scale; 50 us is some ten kernel
launches, below which a start is the launch's jitter.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ccoverlap.whatif.dispatch import Result
from ccoverlap.whatif.duration import allowance
from ccoverlap.whatif.step import Step

STEP_TOLERANCE = 0.05
START_SHARE = 0.05
START_FLOOR_US = 50.0
SHOWN = 3  # disagreeing collectives named in the one line
HOLD_ROUNDS = 4  # `hold` on its own output: each round raises a floor only where the last left it too slow


@dataclass(frozen=True)
class Disagreement:
    name: str
    stream: int
    measured_us: float  # its start (or end) from its step's start, the median over the typical steps
    simulated_us: float
    what: str = "start"  # which of the launch's times: "start" or "end"

    def __str__(self) -> str:
        at = "at" if self.what == "start" else "ending at"
        return (f"{self.name[:50]} (stream {self.stream}) measured {at} {self.measured_us / 1000:.3f} ms, "
                f"simulated {at} {self.simulated_us / 1000:.3f} ms")


@dataclass(frozen=True)
class Validation:
    measured_us: float  # the median measured step span
    simulated_us: float  # the median simulated default
    tolerance_us: float  # for a collective's start
    steps: tuple[str, ...]  # the typical steps compared
    disagree: tuple[Disagreement, ...]  # collectives whose start is off, in launch order
    first_off: Disagreement | None = None  # the first launch whose end is off by more than the tolerance
    idle_us: float | None = None  # the GPU's idle time within the measured step, median (None: not captured)
    residuals: tuple[float, ...] = ()  # each typical step's measured span over its simulated default

    @property
    def unexplained(self) -> tuple[float, float] | None:
        """The typical steps' measured spans against their simulated defaults, the least and the most of them over
        the median (the one the prediction is anchored to), lower first: where these differ, the steps differ by
        something the simulator gives them alike (a kernel twice as slow in some steps as in others beside the same
        collective), and a lever may bring every step to the fastest or the slowest of them. None with no step."""
        if not self.residuals:
            return None
        mid = statistics.median(self.residuals)
        return min(self.residuals) / mid, max(self.residuals) / mid

    @property
    def step_error(self) -> float:
        return self.simulated_us / self.measured_us - 1

    @property
    def step_ok(self) -> bool:
        return abs(self.step_error) <= STEP_TOLERANCE

    @property
    def reproduced(self) -> bool:
        return self.step_ok and not self.disagree

    def refused(self) -> str | None:
        """One line saying why no lever is predicted for this capture, or None where it is reproduced."""
        if self.reproduced:
            return None
        why = [] if self.step_ok else [
            f"the simulated default step {self.simulated_us / 1000:.3f} ms is {100 * self.step_error:+.1f}% off the "
            f"measured {self.measured_us / 1000:.3f} ms (median of {len(self.steps)} typical steps; tolerance "
            f"{100 * STEP_TOLERANCE:g}%)"]
        if self.disagree:
            why.append(f"{len(self.disagree)} collective start(s) off by more than {self.tolerance_us / 1000:.3f} ms: "
                       + "; ".join(map(str, self.disagree[:SHOWN])))
        if self.first_off:
            why.append(f"the first launch off: {self.first_off}")
        return "cannot predict this capture: " + "; ".join(why)

    def anchor(self, simulated_us: float) -> float:
        """A simulated step as a prediction of the measured one: the measured step x (simulated / simulated default)."""
        return self.measured_us * simulated_us / self.simulated_us

    def to_dict(self) -> dict:
        return {"measured_step_us": self.measured_us, "measured_idle_us": self.idle_us,
                "simulated_default_us": self.simulated_us,
                "step_error": self.step_error, "step_tolerance": STEP_TOLERANCE,
                "start_tolerance_us": self.tolerance_us, "typical_steps": list(self.steps),
                "reproduced": self.reproduced, "refused": self.refused(), "residuals": list(self.residuals),
                "disagree": [{"name": d.name, "stream": d.stream, "measured_start_us": d.measured_us,
                              "simulated_start_us": d.simulated_us} for d in self.disagree],
                "first_off": self.first_off and {"name": self.first_off.name, "stream": self.first_off.stream,
                                                 "measured_end_us": self.first_off.measured_us,
                                                 "simulated_end_us": self.first_off.simulated_us}}


def validate(steps: Sequence[Step], defaults: Sequence[Result]) -> Validation:
    """The simulated defaults (`defaults[n]` of `steps[n]`) against the measured steps and collective starts."""
    measured = statistics.median(s.measured_us for s in steps)
    tolerance = max(START_SHARE * measured, START_FLOOR_US)
    starts: dict[int, list[tuple[str, int, float, float]]] = defaultdict(list)
    for step, result in zip(steps, defaults):
        for n, i in enumerate(step.comm):
            k = step.kernels[i]
            if k.measured_start_us is not None:
                starts[n].append((k.name, k.stream, k.measured_start_us, result.kernels[i].start_us))
    disagree = [d for d in map(_median, starts.values()) if abs(d.simulated_us - d.measured_us) > tolerance]
    idle = [s.idle_us for s in steps if s.idle_us is not None]
    return Validation(measured, statistics.median(r.step_us for r in defaults), tolerance,
                      tuple(s.name for s in steps), tuple(disagree), first_off(steps, defaults, tolerance),
                      statistics.median(idle) if idle else None,
                      tuple(s.measured_us / r.step_us for s, r in zip(steps, defaults) if s.measured_us and r.step_us))


def hold(steps: Sequence[Step], defaults: Sequence[Result]) -> tuple[list[Step], list[str]]:
    """The steps with every launch held (`Kernel.held`) whose simulated default (`defaults[n]` of `steps[n]`) lasts
    longer than it measured, past the allowance: the simulator slowed it for sharing an SM or the memory system more
    than the capture shows it slowed. Held, its CTAs run no slower than the whole launch measured (its time alone
    over its measured span, the allowance added: 1 where it did not slow). A launch held already and still simulated
    too long has its floor raised by that excess (at most to 1): part of its measured slowdown is room the simulator
    already takes from it (a collective holding some of its SMs), which the first floor counted twice. A launch
    without an SM (a copy) or a measured span is left as it is. Also the held launches' names, each once."""
    out, names = [], {}
    for step, result in zip(steps, defaults):
        def floor(n: int, k) -> float | None:
            if k.footprint is None or k.measured_start_us is None or k.measured_end_us is None:
                return k.held
            measured = k.measured_end_us - k.measured_start_us
            simulated = result.kernels[n].end_us - result.kernels[n].start_us
            if simulated <= measured + allowance(k.alone_us):
                return k.held
            if k.held is None:
                return min(1.0, (k.alone_us + allowance(k.alone_us)) / measured)
            return min(1.0, k.held * simulated / measured)
        kernels = tuple(k if (f := floor(n, k)) == k.held else replace(k, held=f) for n, k in enumerate(step.kernels))
        names.update((k.name, None) for k in kernels if k.held is not None)
        out.append(step.replace(kernels=kernels))
    return out, list(names)


def _median(times: Sequence[tuple[str, int, float, float]], what: str = "start") -> Disagreement:
    """One launch's (name, stream, measured, simulated) times over the typical steps, as their medians."""
    name, stream = times[0][:2]
    return Disagreement(name, stream, statistics.median(m for *_, m, _ in times),
                        statistics.median(s for *_, s in times), what)


def first_off(steps: Sequence[Step], defaults: Sequence[Result], tolerance: float) -> Disagreement | None:
    """The first launch, in launch order, whose simulated end is off its measured end by more than `tolerance`
    (the medians over the typical steps whose launch sequence is the first's): where a step that is not reproduced
    starts to go wrong, so a refusal names a launch, not only a figure."""
    names = [k.name for k in steps[0].kernels]
    same = [(s, r) for s, r in zip(steps, defaults) if [k.name for k in s.kernels] == names]
    for n, k in enumerate(steps[0].kernels):
        if k.measured_end_us is None:
            continue
        got = _median([(k.name, k.stream, s.kernels[n].measured_end_us, r.kernels[n].end_us) for s, r in same], "end")
        if abs(got.simulated_us - got.measured_us) > tolerance:
            return got
    return None
