"""From a diagnosis to levers: what each part of the lost time is fixed by, ranked by expected gain.

Every lever named is one of the registry's (ccoverlap.control.levers); the gain a lever
can bring is what its causes explain, capped by the scheduling headroom (the
ideal scheduler's bound). Below NOTHING_TO_GAIN_PCT of the step, the verdict is
"nothing to gain here".
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ccoverlap.doctor.analysis.contention import Cause, RankDiagnosis
from ccoverlap.doctor.analysis.trace import short_name

#: Headroom below this share of the step time: no lever is worth recommending.
NOTHING_TO_GAIN_PCT = 2.0
COMM_SLOWDOWN = "comm_slowdown"  # collectives ran slower beside compute
COMPUTE_SLOWDOWN = "compute_slowdown"  # compute ran slower beside collectives
#: What explains lost time -> the levers (registry names, with a value where not the lever's default) that fix it,
#: best first. Skew (a late peer rank) and dependency (nothing to overlap with) have none: no scheduling lever
#: on this rank changes them.
LEVERS_FOR: dict[str, tuple[str, ...]] = {
    Cause.CARVEOUT.value: ("carveout-hint",),
    Cause.REGISTERS.value: ("nccl-threads", "shape"),
    # priority first: behind a grid of many waves it dispatches the comm CTAs as the first compute blocks retire
    # (lab, H200: 5.88 ms of SM-wait behind a full FMA grid, 0.94-0.96 ms under priority, docs/results.md)
    Cause.THREADS.value: ("priority", "shape", "nccl-threads"),
    Cause.SHARED_MEMORY.value: ("shape",),
    Cause.BLOCKS.value: ("shape",),
    Cause.CLUSTER.value: ("nccl-cluster=1",),
    Cause.DISPATCH_ORDER.value: ("priority",),
    COMM_SLOWDOWN: ("sm-carveout",),
    COMPUTE_SLOWDOWN: ("nccl-ctas",),
}


@dataclass(frozen=True)
class Recommendation:
    lever: str  # a strategy term: a registry lever, with =value where not its default
    gain_ms: float  # per rank: what its causes explain, capped by the headroom
    evidence: str

    def to_dict(self) -> dict:
        return {"lever": self.lever, "gain_ms": self.gain_ms, "evidence": self.evidence}


@dataclass(frozen=True)
class Verdict:
    """Per rank (the mean over the ranks given): the headroom, the levers worth trying, and one line."""

    headroom_ms: float
    headroom_pct: float | None
    recommendations: tuple[Recommendation, ...]
    unrecoverable_ms: dict[str, float]  # skew and dependency: exposed time no lever on this rank changes
    line: str


def _explained(diagnoses: Sequence[RankDiagnosis]) -> dict[str, tuple[float, str]]:
    """What explains lost time (LEVERS_FOR's keys) -> (ms per rank, evidence)."""
    n = len(diagnoses)
    comm = [c for d in diagnoses for c in d.comm]
    waited = sum(c.exposed["sm_wait"] for c in comm)
    by_cause: dict[str, list] = defaultdict(list)
    for c in comm:
        if c.exposed["sm_wait"] > 0:
            by_cause[c.cause.value].append(c)
    out = {}
    for cause, cs in by_cause.items():
        ms = sum(c.exposed["sm_wait"] for c in cs) / 1000
        what = Counter(c.kernel.collective[0] if c.kernel.collective else short_name(c.kernel.name) for c in cs)
        behind = Counter(c.blocked_by[0] for c in cs if c.blocked_by)
        where = f" behind {short_name(behind.most_common(1)[0][0])}" if behind else ""
        share = 100 * ms * 1000 / waited
        out[cause] = (ms / n, f"{share:.0f}% of {what.most_common(1)[0][0]} SM-wait is {cause}{where} "
                              f"({ms / n:.3f} ms of exposed communication per rank)")
    slow = sum(c.exposed["slowdown"] for c in comm) / 1000
    if slow > 0:
        out[COMM_SLOWDOWN] = (slow / n, f"collectives ran slower than alone: {slow / n:.3f} ms of exposed "
                                        "communication per rank")
    measured = sum(d.compute_beside_comm[0] for d in diagnoses)
    alone = sum(d.compute_beside_comm[1] for d in diagnoses)
    if measured > alone:
        worst = Counter(d.compute_beside_comm[2] for d in diagnoses if d.compute_beside_comm[2]).most_common(1)
        out[COMPUTE_SLOWDOWN] = ((measured - alone) / 1000 / n, f"compute beside communication ran "
                                 f"{measured / alone:.2f}x its time alone (most: {short_name(worst[0][0])})")
    return out


def verdict(diagnoses: Sequence[RankDiagnosis]) -> Verdict:
    """The levers worth trying for these ranks (one rank, or a strategy's), ranked by expected gain."""
    n = max(len(diagnoses), 1)
    headroom = sum(d.headroom_ms for d in diagnoses) / n
    step = sum(d.step_ms for d in diagnoses) / n
    pct = 100 * headroom / step if step > 0 else None
    parts = {p: sum(d.exposed_ms[p] for d in diagnoses) / n for p in ("skew", "dependency")}
    rest = ", ".join(f"{p} {ms:.3f} ms" for p, ms in parts.items() if ms > 0)
    unrecoverable = f"; exposed beyond any lever: {rest}" if rest else ""
    if pct is None or pct < NOTHING_TO_GAIN_PCT:
        shown = "-" if pct is None else f"{pct:.1f}%"
        return Verdict(headroom, pct, (), parts, f"nothing to gain here: headroom {headroom:.3f} ms ({shown})"
                       f"{unrecoverable}")
    gains: dict[str, tuple[float, str]] = {}
    for what, (ms, evidence) in sorted(_explained(diagnoses).items(), key=lambda e: -e[1][0]):
        for lever in LEVERS_FOR.get(what, ()):
            best = gains.get(lever, (0.0, evidence))
            gains[lever] = (best[0] + ms, best[1])
    recs = tuple(sorted((Recommendation(lever, min(ms, headroom), evidence) for lever, (ms, evidence) in gains.items()
                         if ms > 0), key=lambda r: -r.gain_ms))
    top = f"; try {recs[0].lever} (up to {recs[0].gain_ms:.3f} ms): {recs[0].evidence}" if recs else \
        "; no lever explains it"
    return Verdict(headroom, pct, recs, parts, f"headroom {headroom:.3f} ms ({pct:.1f}%){top}{unrecoverable}")
