"""Compute slowed beside a collective that started late, priced by the capture's own steps.

A collective that waited for SMs for a reason the occupancy model cannot name (no blocker it can place, cause
unknown) lands its CTAs where and when SMs free up, and the compute beside it can then run far slower than where
it started at its ready time (measured: a radix sort's histogram 5.5x slower beside a collective that waited for a
device-to-device copy, at its usual time where the collective started first; docs/doctor.md). No model prices
that; the capture can. Where another step of the same launch sequence (the same kernels in the same order, as
analysis.steps compares them) ran the same collective at its ready time, the kernels slowed beside it in this
step are given the time they took there (the median over such steps, and never more than measured here), and the
collective its ready time: the replay of both is what starting it at its ready time measured. Priority is the
lever that starts a collective ahead of the grids queued beside it (recommend.LEVERS_FOR); whether it reaches
this wait is not something the trace shows, so the verdict says where the price comes from.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ccoverlap.analysis.mechanisms.base import SM_WAIT_TOLERANCE_US, Mechanism
from ccoverlap.analysis.replay import replay
from ccoverlap.analysis.model import short_name

if TYPE_CHECKING:
    from ccoverlap.analysis.contention import CommWait, RankDiagnosis


def _late(c: CommWait) -> bool:
    """Held back beyond launch latency, its ready time known, and no cause the occupancy model names."""
    return c.sm_wait_us > SM_WAIT_TOLERANCE_US and not c.waited and not c.unresolved


@dataclass(frozen=True)
class Measured:
    """What the capture's steps measured: the late collectives (kernel indices), the compute beside them at its time
    where they were not late (kernel index -> us), and those steps' names."""

    waits: frozenset[int]
    durations: dict[int, float]
    calm: tuple[str, ...]


def measured(d: RankDiagnosis) -> Measured | None:
    """See the module; None where no step gives that measurement."""
    if not d.compute_slowed or len(d.steps) != len(d.replays) or not any(_late(c) for c in d.comm):
        return None  # the cheap answers first
    slowed = {s.index for s in d.compute_slowed}
    comm = {c.index: c for c in d.comm}
    by_sequence: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i, (s, r) in enumerate(zip(d.steps, d.replays, strict=True)):
        if s.shape is not None:
            by_sequence[s.shape.signature, len(r.index)].append(i)
    waits: set[int] = set()
    durations: dict[int, float] = {}
    calm_steps: set[int] = set()
    for i, (s, r) in enumerate(zip(d.steps, d.replays, strict=True)):
        late = [(n, c) for n, k in enumerate(r.index) if (c := comm.get(k)) is not None and _late(c)]
        if not late or s.shape is None:
            continue
        others = [j for j in by_sequence[s.shape.signature, len(r.index)] if j != i]
        place = {n: p for p, n in enumerate(r.order)}  # node -> its place in launch order
        times = None
        for n, c in late:
            calm = [j for j in others if (w := comm.get((o := d.replays[j]).index[o.order[place[n]]])) is not None
                    and w.sm_wait_us <= SM_WAIT_TOLERANCE_US]
            if not calm:
                continue
            times = times or replay(r.nodes)
            there = [(o.nodes, o.order) for o in (d.replays[j] for j in calm)]
            for m, k in enumerate(r.index):
                if k in slowed and times[m][0] < c.kernel.end and times[m][1] > c.kernel.ts:
                    t = statistics.median(nodes[launched[place[m]]][1] for nodes, launched in there)
                    if t < times[m][1] - times[m][0]:
                        durations[k] = min(durations.get(k, t), t)
            waits.add(c.index)
            calm_steps.update(calm)
    if not (waits and durations):
        return None
    return Measured(frozenset(waits), durations, tuple(d.steps[j].name for j in sorted(calm_steps)))


def unmeasured(d: RankDiagnosis) -> tuple[float, float]:
    """Where no step measured it (`measured` None): the collectives that started late for no cause the model names,
    and the compute that ran slower than alone beside them, as (their median wait, that compute's time beyond its
    time alone a step, the mean over the analysed steps), in us; (0, 0) where there are none. Whether starting them
    at their ready time would save that time, the capture cannot tell: heldout_sort's histogram ran 6.45-7.00x its
    time alone in every step where its collective started as the sort's first grid did, 0.99-1.25x where it started
    84.9 us or more before (bench/results/heldout-sort-order-2026-12-07.json)."""
    if not d.compute_slowed or d.started_late is not None:
        return 0.0, 0.0
    late = [c for c in d.comm if _late(c)]
    beside = [s for s in d.compute_slowed if any(s.span_us[0] < c.kernel.end and s.span_us[1] > c.kernel.ts
                                                  for c in late)]
    if not beside:
        return 0.0, 0.0
    return (statistics.median(c.sm_wait_us for c in late),
            sum(s.measured_us - s.alone_us for s in beside) / max(len(d.steps), 1))


def price(d: RankDiagnosis, lever: str = "priority") -> Mechanism | None:
    """The lever's share: the late collectives started at their ready time, the compute beside them at its measured
    time where they were not late."""
    m = d.started_late
    return None if m is None else Mechanism(lever, m.waits, m.durations)


def unmeasured_said(diagnoses: Sequence[RankDiagnosis], floor_us: float) -> str:
    """`unmeasured` in words, where the compute lost at least `floor_us` a step on some rank; empty otherwise."""
    found = [m for d in diagnoses if (m := unmeasured(d))[1] >= floor_us]
    if not found:
        return ""
    wait, lost = (statistics.median(x) for x in zip(*found, strict=True))
    return (f"compute ran {lost / 1000:.3f} ms a step longer than alone beside collectives that started "
            f"{wait / 1000:.3f} ms after they were ready (cause unknown), and no profiled step ran them at their ready "
            "time: what starting them then saves, this capture cannot tell (try priority, which starts a collective "
            "ahead of the grids queued beside it; more profiled steps may hold one that started on time)")


def said(diagnoses: Sequence[RankDiagnosis], ms: float) -> str:
    """In words: which collectives started late, by how much, and what the steps where they did not measured."""
    found = [(d, m) for d in diagnoses if (m := d.started_late) is not None]
    late = [c for d, m in found for c in d.comm if c.index in m.waits]
    calm = list(dict.fromkeys(name for _, m in found for name in m.calm))
    wait = statistics.median(c.sm_wait_us for c in late) / 1000 if late else 0.0
    name = (late[0].kernel.collective[0] if late[0].kernel.collective else short_name(late[0].kernel.name)) \
        if late else "the collective"
    steps = ", ".join(calm[:3]) + (" ..." if len(calm) > 3 else "")
    return (f"{name} started {wait:.3f} ms after it was ready (cause unknown), and the compute beside it ran "
            f"slower than in the steps where it started at its ready time ({steps}); the replay with it started "
            f"then and that compute at its time there ends {ms:.3f} ms sooner (measured in those steps, not "
            f"modelled: whether priority starts it there is not in the trace)")
