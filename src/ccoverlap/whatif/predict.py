"""Simulate a step as captured and under each strategy: predicted step, comm start delay, exposed comm, and the
critical path (the launches an earlier start would shorten the step through, and how much of it is communication)."""
from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ccoverlap.control import levers
from ccoverlap.analysis import intervals
from ccoverlap.whatif import transforms
from ccoverlap.whatif.calibration import Calibration
from ccoverlap.whatif.dispatch import Result, simulate
from ccoverlap.whatif.step import Step


@dataclass(frozen=True)
class Prediction:
    strategy: str
    status: str  # "ok", or why there is no prediction ("no model: lever")
    step_us: float | None = None
    comm_done_us: float | None = None  # the last communication kernel's end, from its launch (its stream reaching it)
    comm_start_delay_us: float | None = None  # summed over comm kernels: first CTA's start - its launch, deps done
    exposed_comm_us: float | None = None  # communication time not covered by compute
    interval: tuple[float, float] | None = None  # step_us's interval from the calibration's measured error
    link_bound_step_us: float | None = None  # fewer or smaller comm CTAs: the step if collectives are link-bound
    critical_path: tuple[tuple[str, int, str], ...] = ()  # its launches in time order: (name, stream, after what)
    critical_comm_us: float | None = None  # the part of the step the critical path spends in communication
    unshared_step_us: float | None = None  # the step with no kernel slowed by sharing (Pace.unshared)
    other_step_us: float | None = None  # the step under the other reading of a lever no trace pins down (UNSURE)
    threads_exact_step_us: float | None = None  # fewer comm threads: the step if their time follows them exactly
    steps_ratios: tuple[float, ...] = ()  # its step over the default's, each typical step (session._predict)
    notes: tuple[str, ...] = field(default_factory=tuple)

    def vs(self, base: Prediction) -> float | None:
        """Predicted step over `base`'s (the capture as simulated)."""
        return self.step_us / base.step_us if self.step_us and base.step_us else None

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def exposed(comm: list[tuple[float, float]], compute: list[tuple[float, float]]) -> float:
    """Length of the union of `comm` spans that no `compute` span covers."""
    return intervals.length(intervals.subtract(intervals.merge(comm), intervals.merge(compute)))


def measures(step: Step, result: Result) -> dict:
    ks = result.kernels
    comm = [i for i in step.comm]
    compute = [i for i, k in enumerate(step.kernels) if not k.comm and k.footprint is not None]
    return {
        "step_us": result.step_us,
        "comm_done_us": ((ks[last].end_us - ks[last].ready_us)
                         if (last := max(comm, key=lambda i: ks[i].end_us, default=None)) is not None else None),
        "comm_start_delay_us": sum(ks[i].start_us - ks[i].ready_us for i in comm) if comm else None,
        "exposed_comm_us": exposed([(ks[i].start_us, ks[i].end_us) for i in comm],
                                   [(ks[i].start_us, ks[i].end_us) for i in compute]),
        **critical(step, result),
    }


def critical(step: Step, result: Result) -> dict:
    """The critical path's launches (named with their stream and what each waited for) and its communication time."""
    path = result.critical_path()
    return {"critical_path": tuple((step.kernels[c.kernel].name, step.kernels[c.kernel].stream, c.how) for c in path),
            "critical_comm_us": sum(c.until_us - c.start_us for c in path if step.kernels[c.kernel].comm)}


_MEDIANS = ("step_us", "comm_done_us", "comm_start_delay_us", "exposed_comm_us", "link_bound_step_us",
            "critical_comm_us", "unshared_step_us", "other_step_us", "threads_exact_step_us")
#: Where a capture is reproduced both with the calibrated slowdown beside others and with none, a lever whose
#: predicted ratios under the two differ by more than this (2% of the step: the doctor's "nothing to gain" scale and
#: the validation's absolute target) is predicted as the range between them, not as a point.
PACE_RESOLUTION = 0.02


def median(per_step: Sequence[Prediction]) -> Prediction:
    """One strategy's predictions for several steps as one: each figure's median over the steps (the interval's
    ends each), the critical path of the median step (the lower median), every note once."""
    first = per_step[0]
    if first.status != "ok":
        return first

    def mid(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    ranked = sorted(per_step, key=lambda p: p.step_us)
    middle = ranked[(len(ranked) - 1) // 2]
    return Prediction(first.strategy, "ok", **{f: mid(getattr(p, f) for p in per_step) for f in _MEDIANS},
                      interval=(mid(p.interval[0] for p in per_step), mid(p.interval[1] for p in per_step)),
                      critical_path=middle.critical_path, notes=_notes(middle, per_step))


_FIGURES = re.compile(r"\d+(?:\.\d+)?")


def _notes(middle: Prediction, per_step: Sequence[Prediction]) -> tuple[str, ...]:
    """Every step's notes once: a note that differs between steps only in its figures (a step's own times) as the
    median step gives it."""
    said = {_FIGURES.sub("#", n): n for n in middle.notes}
    for p in per_step:
        for n in p.notes:
            said.setdefault(_FIGURES.sub("#", n), n)
    return tuple(said.values())


def one(step: Step, strategy: levers.Strategy, cal: Calibration, gpcs: int = 8) -> Prediction:
    if missing := transforms.no_model(strategy):
        return Prediction(strategy.name, f"no model: {', '.join(missing)}")
    try:
        out = transforms.apply(step, strategy, cal.law)
    except transforms.NoModelHere as outside:
        return Prediction(strategy.name, f"no model: {outside}")
    m = measures(out.step, simulate(out.step, cal.pace, gpcs))
    err = cal.error_p90 if cal.error_p90 == cal.error_p90 else 0.0  # NaN: uncalibrated, no interval
    lo, hi = m["step_us"] * (1 - err), m["step_us"] * (1 + err)
    link = None
    notes = out.notes
    if transforms.reshapes_comm(strategy):  # CTA-bound (the law) or link-bound: a trace does not say which
        bound = transforms.apply(step, strategy, transforms.LINK_BOUND).step
        link = simulate(bound, cal.pace, gpcs).step_us
        lo, hi = min(lo, link * (1 - err)), max(hi, link * (1 + err))
        notes += (f"collectives taken as bound by their CTAs; bound by their link they would keep their time "
                  f"and the step take {link / 1000:.3f} ms (the interval spans both)",)
    exact = (simulate(transforms.apply(step, strategy, transforms.threads_exact(cal.law)).step, cal.pace,
                      gpcs).step_us if transforms.rethreads_comm(strategy) else None)
    unshared = simulate(out.step, cal.pace.unshared(), gpcs).step_us
    other = None
    if whys := transforms.unsure(strategy):  # what decides it is not in a trace: the other reading too
        other = simulate(transforms.apply(step, strategy, cal.law, other=True).step, cal.pace, gpcs).step_us
        lo, hi = min(lo, other * (1 - err)), max(hi, other * (1 + err))
        notes += tuple(f"{why}; under the other reading the step takes {other / 1000:.3f} ms (the interval spans "
                       "both)" for why in whys)
    return Prediction(strategy.name, "ok", **m, interval=(lo, hi), link_bound_step_us=link, notes=notes,
                      unshared_step_us=unshared, other_step_us=other, threads_exact_step_us=exact)


def pace_range(p: Prediction, base: Prediction) -> tuple[float, float] | None:
    """The lever's ratio to the default with the calibrated slowdown beside others and with none (each over the
    default simulated the same way), lower first, where they differ by more than PACE_RESOLUTION; None where the
    prediction does not hang on how much kernels slow each other (or either is missing). Meaningful only where the
    capture cannot tell the two apart (both reproduce it): a lever that makes kernels share SMs as they never did in
    the capture is then predicted as a range, not as the calibration's guess."""
    if p.status != "ok" or not (p.step_us and base.step_us and p.unshared_step_us and base.unshared_step_us):
        return None
    return _apart(p.step_us / base.step_us, p.unshared_step_us / base.unshared_step_us)


def other_range(p: Prediction, base: Prediction) -> tuple[float, float] | None:
    """The lever's ratio to the default under the two readings of a lever no trace pins down (`other_step_us`,
    transforms.UNSURE), lower first, where they differ by more than PACE_RESOLUTION; None otherwise."""
    if p.status != "ok" or not (p.step_us and base.step_us and p.other_step_us):
        return None
    return _apart(p.step_us / base.step_us, p.other_step_us / base.step_us)


def threads_range(p: Prediction, base: Prediction) -> tuple[float, float] | None:
    """The lever's ratio to the default with the fitted thread law and with the collectives' time following their
    threads exactly (`threads_exact_step_us`), lower first, where they differ by more than PACE_RESOLUTION; None
    otherwise: a capture shows each collective at one thread count only."""
    if p.status != "ok" or not (p.step_us and base.step_us and p.threads_exact_step_us):
        return None
    return _apart(p.step_us / base.step_us, p.threads_exact_step_us / base.step_us)


def steps_range(p: Prediction) -> tuple[float, float] | None:
    """The lever's ratio to the default in the typical step where it gains most and in the one where it gains least,
    lower first, where they differ by more than PACE_RESOLUTION: the typical steps disagree (a collective late in
    some, on time in others), and which is the program's usual step the capture cannot tell (the doctor says the
    same, analysis/recommend.py); None otherwise."""
    return _apart(min(p.steps_ratios), max(p.steps_ratios)) if p.status == "ok" and p.steps_ratios else None


def _apart(a: float, b: float) -> tuple[float, float] | None:
    """Two readings of a lever's ratio as a range, lower first, where they differ by more than PACE_RESOLUTION."""
    return (min(a, b), max(a, b)) if abs(a - b) > PACE_RESOLUTION else None


def names(strategies: Sequence[levers.Strategy]) -> list[str]:
    """What `predict` simulates, in its order: the step as captured (`default`) first, then each strategy."""
    return [levers.DEFAULT] + [s.name for s in strategies if s.name != levers.DEFAULT]


def predict(step: Step, strategies: Sequence[levers.Strategy], cal: Calibration, gpcs: int = 8,
            done: Callable[[str], None] | None = None) -> list[Prediction]:
    """The step as captured (`default`) first, then each strategy (`names`); `done(name)` after each, where given
    (a long capture's progress)."""
    out = []
    for n in names(strategies):
        out.append(one(step, levers.strategy(n), cal, gpcs))
        if done:
            done(n)
    return out
