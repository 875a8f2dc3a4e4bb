"""What the tuner tries: one arm per value of every lever that applies here (the registry's `tries`) and per value
of every user knob (--env), ordered by the doctor's recommendations; and how arms that each helped combine."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ccoverlap.control import levers
from ccoverlap.util.errors import UsageError
from ccoverlap.control.policy import TunedPolicy

DEFAULT = TunedPolicy.of(levers.DEFAULT)


@dataclass(frozen=True)
class Space:
    arms: tuple[TunedPolicy, ...]  # single levers and single knobs, in the order to try them
    skipped: dict[str, str]  # lever -> why it is not tried here


def arms(host: levers.Host, chosen: Sequence[str], knobs: Mapping[str, Sequence[str]]) -> Space:
    """Every single-lever and single-knob candidate that applies on `host` (`chosen`: only those levers; empty:
    all). UsageError where a lever the user chose cannot apply, naming why."""
    out, skipped = [], {}
    for lv in levers.LEVERS:
        if chosen and lv.name not in chosen:
            continue
        if reason := lv.applies(host, "process"):
            if chosen:
                raise UsageError(f"--levers {lv.name}: {reason}")
            skipped[lv.name] = reason
            continue
        out += [TunedPolicy.of(levers.Strategy(((lv.name, value),))) for value in lv.candidates]
    for name, values in knobs.items():
        out += [TunedPolicy.of(levers.DEFAULT, {name: value}) for value in values]
    return Space(tuple(out), skipped)


def _lever(term: str) -> str:
    return term.partition("=")[0]


def ordered(arms: Sequence[TunedPolicy], recommended: Sequence[str]) -> list[TunedPolicy]:
    """The doctor's recommended levers first (in its order of expected gain; the recommended value of a lever
    before its others), then the user's knobs, then the rest in registry order. A recommended combination
    (priority+comm-carveout-hint: its part alone may gain nothing, so the combination stage would never pair it)
    is an arm of its own at its rank, where every lever of it is an arm here."""
    here = {a.levers[0][0] for a in arms if not a.knobs}
    combos = [levers.strategy(t) for t in recommended if "+" in t]
    arms = [*arms, *(TunedPolicy.of(c) for c in combos if c.values.keys() <= here)]

    def key(i_arm):
        i, arm = i_arm
        if arm.knobs:
            return (len(recommended), 0, i)
        if len(arm.levers) > 1:
            return (recommended.index(levers.Strategy(arm.levers).name), 0, i)
        name, value = arm.levers[0]
        for rank, term in enumerate(recommended):
            if _lever(term) == name:
                exact = levers.strategy(term).values.get(name) == value
                return (rank, 0 if exact else 1, i)
        return (len(recommended) + 1, 0, i)

    return [arm for _, arm in sorted(enumerate(arms), key=key)]


def arm_strategy(arm: TunedPolicy) -> str | None:
    """The strategy name of a single-lever arm (None for a knob's arm)."""
    return None if arm.knobs or len(arm.levers) != 1 else levers.Strategy(arm.levers).name


def by_prediction(arms: Sequence[TunedPolicy], gains: Mapping[str, float], floor: float,
                  recommended: Sequence[str] = ()) -> tuple[list[TunedPolicy], dict[str, str]]:
    """The doctor's recommended levers first, as `ordered` puts them and never pruned (the doctor measured them;
    the simulator missed measured gains on known-answer programs, docs/whatif.md); then the arms the what-if
    simulator predicted for, best predicted gain first, those below `floor` (a share of the step) pruned
    (lever -> why); then the others in their order."""
    doctors = {_lever(term) for term in recommended}
    first = [a for a in arms if not a.knobs and a.levers[0][0] in doctors]
    arms = [a for a in arms if a not in first]
    known = [a for a in arms if arm_strategy(a) in gains]
    rest = [a for a in arms if arm_strategy(a) not in gains]
    known.sort(key=lambda a: -gains[arm_strategy(a)])
    pruned = {}
    for a in known:
        if gains[arm_strategy(a)] < floor:
            pruned[arm_strategy(a)] = (f"predicted gain {100 * gains[arm_strategy(a)]:+.1f}% of the step, below the "
                                       f"noise floor of {100 * floor:g}% (ccoverlap whatif on the doctor's run)")
    return first + [a for a in known if arm_strategy(a) not in pruned] + rest, pruned


def combine(base: TunedPolicy, arm: TunedPolicy) -> TunedPolicy | None:
    """`base` with `arm`'s lever or knob added; None where they touch the same lever, knob or variable."""
    mine = {name for name, _ in base.levers} | {name for name, _ in base.knobs}
    theirs = {name for name, _ in arm.levers} | {name for name, _ in arm.knobs}
    if mine & theirs:
        return None
    try:
        return TunedPolicy.of(levers.Strategy(base.levers + arm.levers), dict(base.knobs + arm.knobs))
    except UsageError:  # two levers that set one variable to different values
        return None
