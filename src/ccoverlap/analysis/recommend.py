"""From a diagnosis to levers: each mechanism's cost is a replay, each lever's gain is the replay with the share
of the mechanisms it can remove taken away, and the levers are ranked by that gain.

`LEVERS_FOR` is the one table from a mechanism (a cause's SM-wait, a slowdown beside the other side) to the
levers of the registry (ccoverlap.control.levers) that remove it, each with the condition under which it can
for one collective (the occupancy model applied to the footprints the trace recorded, and the order of the
launches); `REMEDIES` is the same turned round, by lever, checked against the registry at import (a lever
that removes nothing known says so in NO_REMEDY). Where no lever can, the time is headroom beyond any lever, and the
verdict says what would take it (an SM partition, or nothing known). Below NOTHING_TO_GAIN_PCT of the step, the verdict
is "nothing to gain here".
"""
from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from operator import itemgetter

from ccoverlap.analysis import steps
from ccoverlap.control import levers
from ccoverlap.analysis.contention import PARTS, CommWait, RankDiagnosis
from ccoverlap.analysis.deps import GRAPH_EDGES_UNKNOWN
from ccoverlap.analysis.mechanisms.base import (COMM_SLOWED, COMPUTE_SLOWED, SM_WAIT, SM_WAIT_TOLERANCE_US, Cause,
                                                Mechanism, holds_every_sm)
from ccoverlap.analysis.mechanisms import compute_slowed, late_start
from ccoverlap.analysis.mechanisms.dispatch import dispatching
from ccoverlap.analysis.model import short_name
from ccoverlap.model.limits import DeviceLimits
from ccoverlap.model.occupancy import beside
from ccoverlap.model.planner import NCCL_SIMPLE_EXTRA_WARP, plan
from ccoverlap.util.errors import UsageError

#: Headroom below this share of the step time: no lever is worth recommending.
NOTHING_TO_GAIN_PCT = 2.0
#: A lever's gain, or a mechanism no lever reaches, below this share of the step is not worth naming.
NAMED_PCT = 0.5

Fits = Callable[[CommWait, DeviceLimits], bool]


@dataclass(frozen=True)
class Remedy:
    """A lever (a registry strategy term) that removes a mechanism where `fits` says it can for one collective
    (None: wherever the mechanism is)."""

    lever: str
    fits: Fits | None = None
    nccl: bool = False  # one of NCCL's own knobs: it reaches NCCL's kernels only
    price: Callable[[RankDiagnosis], Mechanism | None] | None = None  # the lever's whole effect, both sides, where
    # it costs the other side too (compute_slowed.CommLever): replayed for its net, named only where that is a gain
    cost: Callable[[RankDiagnosis, frozenset[int]], dict[int, float]] | None = None  # what removing these waits
    # costs the compute beside them (kernel index -> its duration under the lever), replayed with the waits removed
    measured: Callable[[RankDiagnosis], Mechanism | None] | None = None  # the lever's share as the capture's own
    # steps measured it (mechanisms/late_start.py): never a loss, so no net to check
    said: Callable[[Sequence[RankDiagnosis], float], str] | None = None  # its evidence in words, given its gain

    def applies(self, c: CommWait | None, device: DeviceLimits | None) -> bool:
        if self.nccl and c is not None and not _is_nccl(c):
            return False
        if self.fits is None or c is None:
            return True
        return device is not None and c.blocker is not None and c.blocker.footprint is not None \
            and c.kernel.footprint is not None and _safe(self.fits, c, device)


def _safe(fits: Fits, c: CommWait, device: DeviceLimits) -> bool:
    try:
        return fits(c, device)
    except (UsageError, ValueError):  # a footprint the model cannot place: no claim
        return False


def _is_nccl(c: CommWait) -> bool:
    return "nccl" in c.kernel.name.lower() or "rccl" in c.kernel.name.lower()


def _pad_fits(c: CommWait, device: DeviceLimits) -> bool:
    """Shaping pads compute launched while communication is in flight (the interposer's gate), so only a blocker
    launched after the collective (correlation ids grow in launch order); and a pad must let the CTA in."""
    if c.blocker.correlation < c.kernel.correlation:
        return False
    p = plan(device, c.blocker.footprint, c.kernel.footprint, drain=None)
    return p.feasible and p.pad_bytes > 0


def _smaller_cta_fits(c: CommWait, device: DeviceLimits) -> bool:
    """NCCL_NTHREADS at the lever's value (plus Simple's sync warp): does the smaller CTA fit beside the blocker?"""
    threads = int(levers.BY_NAME["nccl-threads"].default) + NCCL_SIMPLE_EXTRA_WARP
    comm = c.kernel.footprint
    if comm.threads <= threads:
        return False  # it is that small already
    return beside(device, c.blocker.footprint, replace(comm, threads=threads)).fits


def _blocks_retire(c: CommWait, device: DeviceLimits) -> bool:
    """Priority dispatches the collective's CTAs as the blocker's blocks retire: only a grid of more than one wave
    still dispatching while the collective waited (from its ready time, or the grid's start if later) retires
    blocks to hand over."""
    return dispatching(device, c.blocker, max(c.ready_us, c.blocker.ts))


def _launched_first(c: CommWait, device: DeviceLimits) -> bool:
    """One hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1) dispatches in launch order: it helps a collective
    launched before its blocker and ready by the time the blocker started (then it takes its SMs first)."""
    return c.kernel.correlation < c.blocker.correlation and c.ready_us <= c.blocker.ts + SM_WAIT_TOLERANCE_US


#: Mechanism -> the levers that remove it, best first. Evidence (docs/results.md, shared NOTES): priority behind a
#: full multi-wave grid takes the comm CTAs in as its blocks retire, whichever of the SM's resources its blocks fill
#: (lab, threads: 5.88 ms of SM-wait to 0.94 ms; held-out unfused attention, registers behind a softmax: 0.329 ms of
#: 0.358 realized), but not the shared-memory configuration, which an SM changes only once it drains; the
#: carveout hint lets a CTA's shared memory into an SM configured by a 0 B kernel (3.45 ms to 0.002 ms); clusters
#: of 1 let the CTAs onto SMs left idle that clusters of 4 cannot take (green-cluster case); fewer NCCL CTAs give
#: compute back what a long collective took beside it (16 CTAs +10%, 8 +0.3%) but stretch the collective (NOTES: 8
#: CTAs made a GEMM step 1.5x slower): priced on both sides, named only where the replay nets a gain
#: (mechanisms/compute_slowed.py); one hardware queue dispatches a collective launched before its blocker first,
#: whatever held it back (known-answer carveout program: 1.0 ms, as the hint), and a compute grid released with a
#: collective, which then ran many times its time alone, one whole before the other (compute_slowed.CO_RELEASED:
#: held-out sort and fp8 amax, 12-15%). A collective slowed beside compute has no lever known to remove it
#: (sm-carveout does not reach cuBLAS's GEMMs on torch 2.11 / CUDA 13, NOTES), and neither does an SM-wait behind
#: a kernel no lever can make room beside: those are headroom beyond any lever.
#: priority starts a collective beside its blocker, and its CTAs take room from the blocker's blocks
#: (compute_slowed.landing: most where they land first on idle SMs, which take the collective's configuration); one
#: hardware queue dispatches the collective ahead of its blocker, on the SMs free then
PRIORITY = partial(Remedy, "priority", cost=compute_slowed.landing)
#: ... and with the collective's own carveout hint at its most, an idle SM it lands on first keeps the room compute's
#: blocks need (measured on the H200: graph_dispatch's grid 2211 us beside the prioritized collective, 2012 with it)
HINTED = int(levers.BY_NAME["comm-carveout-hint"].default)
PRIORITY_HINTED = partial(Remedy, "priority+comm-carveout-hint", cost=partial(compute_slowed.landing, hint=HINTED))
FIRST = Remedy("max-connections", _launched_first, cost=partial(compute_slowed.landing, first=True))
#: priority as the blocker's blocks retire, with and without the collective's own hint
RETIRING = (PRIORITY(_blocks_retire), PRIORITY_HINTED(_blocks_retire))
LEVERS_FOR: dict[str, tuple[Remedy, ...]] = {
    SM_WAIT + Cause.CARVEOUT.value: (Remedy("carveout-hint"), FIRST),
    SM_WAIT + Cause.REGISTERS.value: (*RETIRING, Remedy("nccl-threads", _smaller_cta_fits, nccl=True),
                                      Remedy("shape", _pad_fits), FIRST),
    SM_WAIT + Cause.THREADS.value: (*RETIRING, Remedy("shape", _pad_fits),
                                    Remedy("nccl-threads", _smaller_cta_fits, nccl=True), FIRST),
    SM_WAIT + Cause.SHARED_MEMORY.value: (*RETIRING, Remedy("shape", _pad_fits), FIRST),
    SM_WAIT + Cause.BLOCKS.value: (*RETIRING, Remedy("shape", _pad_fits), FIRST),
    SM_WAIT + Cause.CLUSTER.value: (Remedy("nccl-cluster=1", nccl=True), FIRST),
    SM_WAIT + Cause.DISPATCH_ORDER.value: (PRIORITY(), PRIORITY_HINTED(), FIRST),
    COMM_SLOWED: (),
    COMPUTE_SLOWED: (*(Remedy(lv.lever, price=lv.price)
                       for lv in [*map(compute_slowed.fewer_ctas, levers.BY_NAME["nccl-ctas"].candidates),
                                  compute_slowed.smaller_ctas(levers.BY_NAME["nccl-threads"].default)]),
                     Remedy("priority", measured=late_start.price, said=late_start.said),
                     Remedy("max-connections", measured=compute_slowed.one_queue, said=compute_slowed.one_queue_said)),
}
#: the levers of the registry that remove no mechanism the diagnosis finds, and why
NO_REMEDY = {
    "sm-carveout": levers.NotApplicable("it does not reach cuBLAS's GEMMs on torch 2.11 / CUDA 13 (NOTES)"),
    "green": levers.NotApplicable("an SM partition: named where a blocker holds every SM, as beyond any lever"),
    "nccl-cta-policy": levers.NotApplicable("no mechanism the diagnosis finds is known to yield to it"),
}


def _by_lever(table: dict[str, tuple[Remedy, ...]], none: dict[str, levers.NotApplicable]) -> dict:
    """`table` turned round: lever name -> its (mechanism, remedy) pairs, levers and pairs in the table's order
    (the verdict's order among equal gains), then the levers of `none`."""
    out: dict[str, list[tuple[str, Remedy]]] = {}
    for key, remedies in table.items():
        for r in remedies:
            for name, _ in levers.strategy(r.lever).levers:
                out.setdefault(name, []).append((key, r))
    if both := sorted(set(out) & set(none)):
        raise TypeError(f"NO_REMEDY names levers that LEVERS_FOR has remedies for: {', '.join(both)}")
    return {name: tuple(pairs) for name, pairs in out.items()} | none


#: lever -> the mechanisms it removes, as (mechanism, remedy) pairs, or NotApplicable(why)
REMEDIES: Mapping[str, tuple[tuple[str, Remedy], ...] | levers.NotApplicable] = levers.mechanisms(
    "remedy", _by_lever(LEVERS_FOR, NO_REMEDY))


@dataclass(frozen=True)
class Spread:
    """A per-step value over the typical steps: the median step's, and the least and most of any typical step."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values)) if values else cls(0.0, 0.0, 0.0)

    def to_list(self) -> list[float]:
        return [self.low, self.high]


@dataclass(frozen=True)
class Recommendation:
    lever: str  # a strategy term: a registry lever, with =value where not its default
    gain_ms: float  # per rank, the median typical step's: the replay with the mechanisms' share it removes taken away
    evidence: str
    spread_ms: tuple[float, float] = (0.0, 0.0)  # the least and most gain of a typical step

    def to_dict(self) -> dict:
        return {"lever": self.lever, "gain_ms": self.gain_ms, "gain_spread_ms": list(self.spread_ms),
                "evidence": self.evidence}


@dataclass(frozen=True)
class Verdict:
    """Per rank (the mean over the ranks given), the median typical step's: the headroom, what levers can reach,
    the levers, and one line. Steps left out as atypical (analysis.steps) are named, never averaged in."""

    headroom_ms: float  # every known mechanism removed
    headroom_pct: float | None  # the median typical step's share of its span
    lever_headroom_ms: float  # every lever's share removed together: what levers can reach
    lever_headroom_pct: float | None
    by_mechanism_ms: dict[str, float | None]  # each mechanism alone (None: unknown, no alone window)
    lever_steps_ms: tuple[float, ...]  # lever_headroom_ms step by step, every analysed step (mean over the ranks)
    recommendations: tuple[Recommendation, ...]
    unrecoverable_ms: dict[str, float]  # skew and dependency: exposed time no lever on this rank changes
    exposed_ms: dict[str, float | None]  # PARTS: the exposed communication by part (None: slowdown, no alone window)
    slowdown_known: bool
    line: str
    typical: tuple[str, ...] = ()  # the typical steps' names, the headline's
    left_out: tuple[tuple[str, str], ...] = ()  # (step, why) of the steps left out as atypical
    headroom_pct_spread: tuple[float, float] | None = None  # the least and most share of a typical step

    def to_dict(self) -> dict:
        return {"headroom_ms": self.headroom_ms, "headroom_pct": self.headroom_pct,
                "headroom_pct_spread": list(self.headroom_pct_spread) if self.headroom_pct_spread else None,
                "lever_headroom_ms": self.lever_headroom_ms, "lever_headroom_pct": self.lever_headroom_pct,
                "lever_steps_ms": list(self.lever_steps_ms), "by_mechanism_ms": self.by_mechanism_ms,
                "slowdown_known": self.slowdown_known, "typical_steps": list(self.typical),
                "left_out_steps": [{"step": s, "reason": why} for s, why in self.left_out]}


def _share(d: RankDiagnosis, key: str, remedy: Remedy) -> Mechanism | None:
    """The part of mechanism `key` of `d` that `remedy` can remove (None: none of it)."""
    m = d.mechanisms.get(key)
    if m is None:
        return None
    if remedy.price is not None or remedy.measured is not None:
        return (remedy.price or remedy.measured)(d) if m.known else None
    if not m.waits:
        if not m.known or not m.durations or (remedy.nccl and not any(_is_nccl(c) for c in d.comm)):
            return None
        return replace(m, key=remedy.lever)
    waits = frozenset(c.index for c in d.comm if c.index in m.waits and remedy.applies(c, d.device))
    if not waits:
        return None
    return Mechanism(remedy.lever, waits, remedy.cost(d, waits) if remedy.cost else {})


@dataclass(frozen=True)
class _Typical:
    """The steps the headline reads: typical on every rank (by name), and those left out with why."""

    names: tuple[str, ...]
    left_out: tuple[tuple[str, str], ...]
    # diagnosis (by id: each outlives the verdict that reads it) -> where each of `names` is among its steps
    positions: dict[int, tuple[int, ...] | None] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, diagnoses: Sequence[RankDiagnosis]) -> _Typical:
        kept: set[str] | None = None
        out: dict[str, str] = {}
        for d in diagnoses:
            if any(s.shape is None for s in d.steps):
                mine = {s.name for s in d.steps}
            else:
                found = steps.typical([s.shape for s in d.steps])
                mine = set(found.names)
                for i, why in found.left_out:
                    out.setdefault(found.shapes[i].name, why if len(diagnoses) == 1 else f"rank {d.rank}: {why}")
            kept = mine if kept is None else kept & mine
        order = [s.name for s in diagnoses[0].steps] if diagnoses else []
        names = tuple(n for n in order if n in (kept or set()))
        if not names:  # no step typical on every rank: every step common to them
            names = tuple(n for n in order if all(n in {s.name for s in d.steps} for d in diagnoses))
            out = {}
        return cls(names, tuple((n, out[n]) for n in order if n in out and n not in names))

    def values(self, diagnoses: Sequence[RankDiagnosis],
               per_step: Callable[[RankDiagnosis], Sequence[float] | None]) -> list[float] | None:
        """Per typical step, the mean over the ranks of `per_step(d)` (one value per step of d); None where one
        rank's is unknown."""
        rows = []
        for d in diagnoses:
            row = per_step(d)
            if row is None:
                return None
            if (at := self._positions(d)) and len(row) == len(d.steps):
                rows.append(itemgetter(*at)(row))  # gathered in C: a verdict asks a dozen times, for thousands
            else:
                by_name = dict(zip((s.name for s in d.steps), row, strict=False))
                rows.append([by_name.get(n, 0.0) for n in self.names])
        # summed over the ranks in their order, as a sum over each step's ranks: one C-level sum a step (thousands)
        return [sum(values) / len(rows) for values in zip(*rows)] if rows else []

    def _positions(self, d: RankDiagnosis) -> tuple[int, ...] | None:
        """Each typical step's place among d's steps (the last of a name, as a dict of them keeps); None where d
        lacks one (its value is 0.0 then) or there are fewer than two (itemgetter gives no tuple)."""
        if (found := self.positions.get(id(d), ())) == ():
            place = {s.name: i for i, s in enumerate(d.steps)}
            found = tuple(place.get(n, -1) for n in self.names)
            found = self.positions[id(d)] = found if len(found) > 1 and min(found) >= 0 else None
        return found

    def line(self) -> str:
        left = "; ".join(f"{n}: {why}" for n, why in self.left_out)
        return f" [median of {len(self.names)} typical step(s)" + (f"; left out: {left}]" if left else "]")


def _host_paced(diagnoses: Sequence[RankDiagnosis], typical: _Typical) -> str:
    """Why the profiled steps may hide contention, where the profiler paced them by the host: the program queues its
    launches ahead of the GPU, so kernels that start together there reached the GPU one by one under the profiler
    (measured: a radix sort launched after a collective; docs/doctor.md). Empty where no rank's were. Held steps
    (doctor/hold.py) had their launches queued: nothing to say. Whether the host paces the program unprofiled is
    not said either: the doctor's few steps outside its windows (a program's first, the one after a window) made
    two GPU-bound held-out programs look host-paced by 21-41% (docs/results.md, "The doctor's hold")."""
    for d in (d for d in diagnoses if d.process):
        idle = typical.values([d], lambda r: [s.shape.idle_us / s.shape.span_us if s.shape and s.shape.span_us
                                             else 0.0 for s in r.steps])
        if (share := d.process.host_paced(idle)) is not None:
            plain, profiled = d.process.step_ms
            return (f"; the profiler paced these steps by the host (rank {d.rank}'s GPU idle {100 * share:.0f}% of "
                    f"the median typical step, {profiled:.2f} ms a step against {plain:.2f} ms unprofiled): "
                    "contention among launches the program queues ahead of the GPU does not show here")
    return ""


def _compute_remedy(lever: str) -> Remedy:
    """The remedy of compute slowed beside communication that `lever` (a strategy term) is."""
    return next(r for r in LEVERS_FOR[COMPUTE_SLOWED] if r.lever == lever)


def _compute_said(diagnoses: Sequence[RankDiagnosis]) -> str:
    """Compute slowed beside communication, in words: how much, the kernel that lost most, and why."""
    measured = sum(d.compute_beside_comm[0] for d in diagnoses if d.compute_beside_comm)
    alone = sum(d.compute_beside_comm[1] for d in diagnoses if d.compute_beside_comm)
    ratio = f"{measured / alone:.2f}x" if alone > 0 else "longer than"
    why = "; ".join(dict.fromkeys(w for d in diagnoses if (w := compute_slowed.story(d))))
    return f"compute beside communication ran {ratio} its measured time alone" + (f" ({why})" if why else "")


def _priced(diagnoses: Sequence[RankDiagnosis], lever: str, ms: float) -> str:
    """A priced lever's two sides: how much longer the collectives take under it, and the replay's net."""
    remedy = _compute_remedy(lever)
    stretch = max((m.durations.get(c.index, c.kernel.dur) / c.kernel.dur for d in diagnoses
                   if (m := remedy.price(d)) is not None for c in d.comm if c.kernel.dur > 0), default=1.0)
    return (f"with {lever} the collectives take {stretch:.1f}x longer (their time scaled by the CTA threads taken "
            f"away): the replay of both ends {ms:.3f} ms sooner" if ms >= 0 else
            f"with {lever} the collectives take {stretch:.1f}x longer (their time scaled by the CTA threads taken "
            f"away): the replay of both ends {-ms:.3f} ms later")


def _evidence(diagnoses: Sequence[RankDiagnosis], keys: set[str], ms: float, typical: _Typical, lever: str) -> str:
    """Why a lever: the mechanism it takes away, with the collectives and their blockers (per typical step)."""
    per = max(len(diagnoses), 1) * max(len(typical.names), 1)
    waits = [c for d in diagnoses for c in d.comm
             if c.waited and SM_WAIT + c.cause.value in keys and c.step in typical.names]
    remedy = _compute_remedy(lever) if COMPUTE_SLOWED in keys else None
    if remedy and remedy.said and waits:  # both: what it says of the compute, and the waits it also removes
        wait = sum(c.sm_wait_us for c in waits) / 1000 / per
        return f"{remedy.said(diagnoses, ms)}; it also removes {wait:.3f} ms of SM-wait per rank and step"
    if waits:
        total = sum(c.sm_wait_us for c in waits)
        by_cause = Counter()
        for c in waits:
            by_cause[c.cause.value] += c.sm_wait_us
        cause, part = by_cause.most_common(1)[0]
        what = Counter(c.kernel.collective[0] if c.kernel.collective else short_name(c.kernel.name) for c in waits)
        behind = Counter(c.blocked_by[0] for c in waits if c.blocked_by)
        where = f" behind {short_name(behind.most_common(1)[0][0])}" if behind else ""
        return (f"{100 * part / total:.0f}% of {what.most_common(1)[0][0]} SM-wait is {cause}{where} "
                f"({total / 1000 / per:.3f} ms of wait per rank and step; "
                f"the replay without it ends {ms:.3f} ms sooner)")
    if remedy:
        if remedy.said:
            return remedy.said(diagnoses, ms)
        return f"{_compute_said(diagnoses)}; {_priced(diagnoses, lever, ms)}"
    return f"the replay without it ends {ms:.3f} ms sooner"


def _levers_in(term: str) -> frozenset[str]:
    """The registry levers a strategy term sets (priority+comm-carveout-hint: two)."""
    return frozenset(levers.strategy(term).values)


def _beyond_parts(recs: list[Recommendation], floor_ms: float,
                  gain: Callable[[Recommendation], float] = lambda r: r.gain_ms) -> list[Recommendation]:
    """A combination (priority+comm-carveout-hint) only where it gains beyond a lever it adds to by the naming floor,
    as `tune` keeps a combination only where it is faster than its best part."""
    terms = {r.lever: _levers_in(r.lever) for r in recs}
    kept = [r for r in recs if not any(terms[s.lever] < terms[r.lever] and gain(s) >= gain(r) - floor_ms
                                       for s in recs)]
    return [replace(r, evidence=r.evidence + "".join(f"; {s.lever} alone: {gain(s):.3f} ms" for s in kept
                                                     if terms[s.lever] < terms[r.lever])) for r in kept]


def _step_gains(diagnoses: Sequence[RankDiagnosis], typical: _Typical,
                parts: Callable[[RankDiagnosis], list[Mechanism]]) -> list[float] | None:
    """Per typical step, the mean over the ranks of the replay with `parts(d)` removed (ms); None where unknown."""
    return typical.values(diagnoses, lambda d: None if (g := d.gain_by_step(parts(d))) is None
                          else [us / 1000 for us in g])


def _gains(diagnoses: Sequence[RankDiagnosis], typical: _Typical,
           parts: Callable[[RankDiagnosis], list[Mechanism]]) -> Spread | None:
    """_step_gains over the typical steps: the median step's, and the least and most."""
    values = _step_gains(diagnoses, typical, parts)
    return None if values is None else Spread.of(values)


def _ranked(recs: list[Recommendation], gain: Callable[[Recommendation], float], order: Mapping[str, tuple],
            floor_ms: float) -> list[Recommendation]:
    """Best gain first; gains within the naming floor of the best are equal (the replay's noise), and among equals
    `order` decides (LEVERS_FOR lists each mechanism's levers best first, by what realized it)."""
    best = max(map(gain, recs), default=0.0)
    return sorted(recs, key=lambda r: (gain(r) < best - floor_ms, -round(gain(r), 6) if gain(r) < best - floor_ms
                                       else 0.0, order[r.lever]))


def _disagree(recs: Sequence[Recommendation], typical: _Typical, step_gains: Mapping[str, list[float]],
              least_ms: float) -> str:
    """Where the median typical step has nothing to gain but some typical steps do: which steps, the levers there,
    and what would tell (more steps). Empty where no typical step's lever reaches `least_ms`."""
    if not recs:
        return ""
    top = recs[0]
    steps = [n for n, g in zip(typical.names, step_gains[top.lever], strict=True) if g >= least_ms]
    others = ", ".join(r.lever for r in recs[1:])
    return (f"; but in {len(steps)} of {len(typical.names)} typical steps ({', '.join(steps)}) {top.lever} reaches up "
            f"to {top.spread_ms[1]:.3f} ms ({top.evidence}){f'; also {others}' if others else ''}: which is the "
            f"program's usual step these steps cannot tell; try {top.lever}, or profile more steps (--steps)")


def _net(diagnoses: Sequence[RankDiagnosis], typical: _Typical, lever: str) -> float | None:
    """A priced lever's net in the median typical step (ms; negative: the step ends later), not clamped at 0."""
    remedy = _compute_remedy(lever)

    def signed(d: RankDiagnosis) -> list[float] | None:
        m = remedy.price(d)
        if m is None:
            return None
        return [(r.measured_end - r.end(m.waits, m.durations)) / 1000 for r in d.replays]

    values = typical.values(diagnoses, signed)
    return None if not values else statistics.median(values)


def _beyond(diagnoses: Sequence[RankDiagnosis], reachable: set[str], by_mechanism: dict[str, float | None],
            floor_ms: float, typical: _Typical, nets: dict[str, float | None] | None = None) -> str:
    """In words, the headroom no lever reaches (mechanisms that cost at least `floor_ms`): what holds it, and what
    would take it."""
    out = []
    per = max(len(diagnoses), 1) * max(len(typical.names), 1)
    for key in sorted({k for d in diagnoses for k, m in d.mechanisms.items() if m.waits}):
        if (by_mechanism.get(key) or 0) < floor_ms:
            continue
        left = [(c, d.device) for d in diagnoses for c in d.comm
                if c.waited and SM_WAIT + c.cause.value == key and c.step in typical.names
                and not any(r.applies(c, d.device) for r in LEVERS_FOR.get(key, ()))]
        if not left:
            continue
        blocker = Counter(c.blocker.name for c, _ in left if c.blocker).most_common(1)
        name = short_name(blocker[0][0]) if blocker else "compute"
        held = any(_holds_every_sm(c, device) for c, device in left)
        out.append(f"{sum(c.sm_wait_us for c, _ in left) / 1000 / per:.3f} ms of "
                   f"{key.removeprefix(SM_WAIT)} SM-wait behind {name}"
                   + (", which holds every SM: only an SM partition makes room beside it (a green context for the "
                      "compute, or a library's own SM count)" if held else ", which no lever can make room beside"))
    if COMPUTE_SLOWED not in reachable and (by_mechanism.get(COMPUTE_SLOWED) or 0) >= floor_ms:
        priced = [f"{lv}: the collectives longer, the step {-ms:.3f} ms later" if ms < 0 else
                  f"{lv}: net {ms:.3f} ms" for lv, ms in (nets or {}).items() if ms is not None]
        out.append(f"{_compute_said(diagnoses)}, {by_mechanism[COMPUTE_SLOWED]:.3f} ms of the step: nothing a lever "
                   f"can do" + (f" ({'; '.join(priced)})" if priced else "")
                   + "; an SM partition leaves a one-full-wave grid the same second wave, copy-engine collectives "
                     "(NCCL's, where offered) are no lever here")
    if COMM_SLOWED not in reachable and (by_mechanism.get(COMM_SLOWED) or 0) >= floor_ms:
        out.append(f"collectives ran {by_mechanism[COMM_SLOWED]:.3f} ms slower than alone beside compute: no lever "
                   "is known to remove that")
    return "; ".join(out)


def _holds_every_sm(c: CommWait, device: DeviceLimits | None) -> bool:
    b = c.blocker
    return b is not None and b.footprint is not None and device is not None and holds_every_sm(device, b.footprint)


def _undiagnosed(diagnoses: Sequence[RankDiagnosis], typical: _Typical) -> tuple[float, str | None]:
    """The median typical step's exposed time (ms, the mean over the ranks) of collectives inside a CUDA graph whose
    edges the trace does not hold (deps.GRAPH_EDGES_UNKNOWN), and the reason: time no mechanism claims, which must not
    read as "nothing to gain". (A wait without its Stream Wait Event record is a note of its own, with its remedy.)"""
    if not any(GRAPH_EDGES_UNKNOWN in t for t in {why.template for d in diagnoses for c in d.comm
                                                   for why in c.unresolved}):
        return 0.0, None  # no such collective (the reasons' few templates looked at once, not each collective's)

    def blind(c: CommWait) -> bool:
        return any(GRAPH_EDGES_UNKNOWN in why.template for why in c.unresolved)

    def per_step(d: RankDiagnosis) -> list[float]:
        """One pass over the collectives (a pass per step was quadratic: 60 s for 8 ranks of 7,356 steps)."""
        us: dict[str, float] = defaultdict(float)
        for c in d.comm:
            if blind(c):
                us[c.step] += c.exposed_us
        return [us.get(s.name, 0.0) / 1000 for s in d.steps]
    exposed = typical.values(diagnoses, per_step) or []
    why = next((str(c.unresolved[0]) for d in diagnoses for c in d.comm if blind(c)), None)
    return (statistics.median(exposed) if exposed else 0.0), why


def exposed_parts(diagnoses: Sequence[RankDiagnosis], typical: _Typical) -> dict[str, float | None]:
    """The median typical step's exposed communication by part (ms, the mean over the ranks), in the headroom's
    unit: a sum over the analysed steps beside a per-step headroom read as a part larger than the step. The
    slowdown part is None where a rank had no alone window (its time is then in dependency)."""
    def part(p: str) -> float | None:
        if p == "slowdown" and not all(d.alone_measured for d in diagnoses):
            return None
        values = typical.values(diagnoses, lambda d: [s.exposed[p] / 1000 for s in d.steps]) or []
        return statistics.median(values) if values else 0.0
    return {p: part(p) for p in PARTS}


def verdict(diagnoses: Sequence[RankDiagnosis]) -> Verdict:
    """The levers worth trying for these ranks (one rank, or a strategy's), ranked by the median typical step's
    replayed gain."""
    diagnoses = list(diagnoses)
    typical = _Typical.of(diagnoses)
    spans = typical.values(diagnoses, lambda d: [s.span_us / 1000 for s in d.steps]) or []
    heads = typical.values(diagnoses, lambda d: [s.headroom_us / 1000 for s in d.steps]) or []
    step = statistics.median(spans) if spans else 0.0
    shares = [100 * h / s for h, s in zip(heads, spans, strict=True) if s > 0]

    def pct(ms: float) -> float | None:
        return 100 * ms / step if step > 0 else None
    headroom = Spread.of(heads).median
    known = all(d.slowdown_known for d in diagnoses)
    keys = sorted({k for d in diagnoses for k in d.mechanisms})
    by_mechanism = {k: None if (g := _gains(diagnoses, typical, lambda d, k=k: [d.mechanisms[k]] if k in d.mechanisms
                                            else [])) is None else g.median for k in keys}
    exposed = exposed_parts(diagnoses, typical)
    parts = {p: exposed[p] or 0.0 for p in ("skew", "dependency")}
    rest = ", ".join(f"{p} {ms:.3f} ms" for p, ms in parts.items() if ms > 0)
    unrecoverable = f"; exposed beyond any lever: {rest}" if rest else ""
    unknown = "" if known else ("; what communication and compute lose beside each other is unknown "
                                "(no alone window: ccoverlap doctor measures each launch alone)")
    unknown += _host_paced(diagnoses, typical)

    # strategy term (nccl-cluster=1) -> what it removes, in LEVERS_FOR's order (the order among equal gains;
    # REMEDIES groups the terms by registry lever, which would put nccl-threads before nccl-ctas=4)
    levers_of: dict[str, list[tuple[str, Remedy]]] = {}
    for key, remedies in LEVERS_FOR.items():
        for r in remedies:
            levers_of.setdefault(r.lever, []).append((key, r))

    def shares_of(d: RankDiagnosis, lever: str) -> list[Mechanism]:
        return [m for key, r in levers_of[lever] if (m := _share(d, key, r)) is not None]

    floor = NAMED_PCT / 100 * step
    least = NOTHING_TO_GAIN_PCT / 100 * step  # a typical step's gain worth a trial, where the median's is not
    recs, some, step_gains, order = [], [], {}, {}
    for lever in levers_of:
        if not any(shares_of(d, lever) for d in diagnoses):
            continue
        values = _step_gains(diagnoses, typical, lambda d, lever=lever: shares_of(d, lever))
        if values is None:
            continue
        gain = Spread.of(values)
        taken = {key for key, r in levers_of[lever] if any(_share(d, key, r) for d in diagnoses)}
        # among equal gains: its place in the remedies of what it removes (best first), then the table's order
        order[lever] = (min(i for key in taken for i, r in enumerate(LEVERS_FOR[key]) if r.lever == lever),
                        len(order))
        if gain.median > 0 and gain.median >= floor:  # below the floor: noise, not a lever's worth
            recs.append(Recommendation(lever, gain.median, _evidence(diagnoses, taken, gain.median, typical, lever),
                                       (gain.low, gain.high)))
        elif gain.high >= least > 0 and not any(r.price for _, r in levers_of[lever]):
            # (a lever priced on both sides costs every step: one step's gain is not its worth)
            step_gains[lever] = values
            some.append(Recommendation(lever, gain.median, _evidence(diagnoses, taken, gain.high, typical, lever),
                                       (gain.low, gain.high)))
    recs = _ranked(recs, lambda r: r.gain_ms, order, floor)
    some = _beyond_parts(_ranked(some, lambda r: r.spread_ms[1], order, floor), floor, lambda r: r.spread_ms[1])
    recs = _beyond_parts(recs, floor)

    named = {r.lever for r in recs}
    counted = [lv for lv in levers_of if lv in named or not any(r.price for _, r in levers_of[lv])]
    terms = {lv: _levers_in(lv) for lv in counted}
    # a lever that a counted combination holds is that combination's part, where the combination removes something:
    # its cost is the combination's to say
    removes = {lv for lv in counted if any(shares_of(d, lv) for d in diagnoses)}
    counted = [lv for lv in counted if not any(terms[lv] < terms[other] for other in removes)]

    def everything(d: RankDiagnosis) -> list[Mechanism]:  # a priced lever only where its net is a gain
        return [m for lever in counted for m in shares_of(d, lever)]

    reach = (_gains(diagnoses, typical, everything) or Spread.of([])).median
    by_step = [g for d in diagnoses if (g := d.gain_by_step(everything(d))) is not None]
    lever_steps = tuple(sum(s) / len(by_step) / 1000 for s in zip(*by_step, strict=False)) if by_step else ()
    reachable = {key for lever in counted for key, r in levers_of[lever] if any(_share(d, key, r) for d in diagnoses)}
    tails = _gains(diagnoses, typical, lambda d: [compute_slowed.wave_tail(d)] if d.compute_slowed else [])
    if any(s.cause == compute_slowed.WAVE_TAIL for d in diagnoses for s in d.compute_slowed) and tails is not None:
        by_mechanism[COMPUTE_SLOWED + ":" + compute_slowed.WAVE_TAIL] = tails.median
    nets = {lv: _net(diagnoses, typical, lv) for lv in levers_of if lv not in named and
            any(r.price for _, r in levers_of[lv])}
    head_pct = statistics.median(shares) if shares else None
    reach_pct = pct(reach)
    shown = "-" if head_pct is None else f"{head_pct:.1f}%"
    spread = (min(shares), max(shares)) if shares else None
    of_steps = typical.line() if len(typical.names) > 1 or typical.left_out else ""
    if spread and len(shares) > 1:
        of_steps = of_steps.replace("typical step(s)", f"typical step(s), {spread[0]:.1f}-{spread[1]:.1f}%", 1)
    blind_ms, why_blind = _undiagnosed(diagnoses, typical)
    blind = ""
    if (pct(blind_ms) or 0.0) >= NOTHING_TO_GAIN_PCT:
        blind = (f"; cannot tell the rest: {blind_ms:.3f} ms of the collectives' exposed time a step waited for what "
                 f"the trace does not show ({why_blind})")
    # compute slowed beside collectives that started late, where no step priced starting them on time
    late = "; " + said if (said := late_start.unmeasured_said(diagnoses, 1000 * floor)) else ""
    if blind and (head_pct is None or head_pct < NOTHING_TO_GAIN_PCT):  # not "nothing": unknown
        line = (f"cannot tell: headroom {headroom:.3f} ms ({shown}) in what the trace shows{of_steps}"
                f"{blind}{unknown}")
        recs = []
    elif head_pct is None or head_pct < NOTHING_TO_GAIN_PCT:
        recs = some if len(typical.names) > 1 else []
        line = (f"nothing to gain here{' in the median typical step' if recs else ''}: headroom {headroom:.3f} ms "
                f"({shown}){of_steps}{_disagree(recs, typical, step_gains, least)}{unknown}{unrecoverable}")
    elif reach_pct is None or reach_pct < NOTHING_TO_GAIN_PCT:
        beyond = (_beyond(diagnoses, reachable, by_mechanism, floor, typical, nets)
                  or "no lever removes the mechanisms found")
        recs = some if len(typical.names) > 1 else []
        head = "cannot tell whether a scheduling lever helps" if late else "nothing a scheduling lever can do"
        line = (f"{head}{' in the median typical step' if recs else ''}: headroom {headroom:.3f} ms ({shown})"
                f"{of_steps}, a lever reaches {reach:.3f} ms: {beyond}{late}"
                f"{_disagree(recs, typical, step_gains, least)}{blind}{unknown}{unrecoverable}")
    else:
        beyond = _beyond(diagnoses, reachable, by_mechanism, floor, typical, nets)
        top = recs[0]
        line = (f"headroom {headroom:.3f} ms ({shown}){of_steps}, a lever reaches {reach:.3f} ms ({reach_pct:.1f}%); "
                f"try {top.lever} (up to {top.gain_ms:.3f} ms): {top.evidence}"
                + (f"; beyond any lever: {beyond}" if beyond else "") + late + blind + unknown + unrecoverable)
    return Verdict(headroom, head_pct, reach, reach_pct, by_mechanism, lever_steps, tuple(recs), parts, exposed,
                   known, line, typical.names, typical.left_out, spread)
