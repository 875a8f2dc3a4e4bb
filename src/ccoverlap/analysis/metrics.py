"""Pure analyses over the trace model: overlap, exposure, slowdown, padding.

Definitions follow Holistic Trace Analysis (HTA) where HTA has one, so the
numbers agree with what PyTorch users already trust (docs/analysis.md):
overlap is the share of merged communication-kernel time covered by merged
compute-kernel time, idle time is the kernel span not covered by any GPU
activity, and the last profiler step is left out as HTA leaves it out.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from operator import attrgetter

from ccoverlap.control import levers
from ccoverlap.analysis.contention import RankDiagnosis, diagnose
from ccoverlap.analysis.intervals import Interval, covered, intersection, length, merge, subtract
from ccoverlap.analysis.recommend import Verdict, verdict
from ccoverlap.analysis.rules import Finding, findings
from ccoverlap.analysis.model import KernelEvent, KernelClass, Trace, analysed_kernels, device_limits
from ccoverlap.analysis.reader import printable
from ccoverlap.util.errors import UsageError
from ccoverlap.model.limits import DeviceLimits
from ccoverlap.model.occupancy import occupancy

def of_kind(kernels: Iterable[KernelEvent], kind: KernelClass) -> list[KernelEvent]:
    return [k for k in kernels if k.kind is kind]


def _merged(kernels: Iterable[KernelEvent]) -> list[Interval]:
    return merge([(k.ts, k.ts + k.dur) for k in kernels])  # KernelEvent.end without its call


# --- padding: which launches carry more shared memory than the same kernel's reference ---

FootprintKey = tuple[str, int, int]  # name, threads per block, registers per thread


_NAME, _FOOTPRINT = attrgetter("name"), attrgetter("footprint")


def _key(k: KernelEvent) -> FootprintKey | None:
    fp = k.footprint
    return (k.name, fp.threads, fp.regs) if fp else None


def smem_reference(kernels: Iterable[KernelEvent]) -> dict[FootprintKey, int]:
    """Smallest shared memory seen per kernel and block shape: its unpadded footprint. Looked at once per
    distinct name and footprint object (the reader shares one among a launch shape's kernels), found in C."""
    ref: dict[FootprintKey, int] = {}
    kernels = list(kernels)
    names, fps = list(map(_NAME, kernels)), list(map(_FOOTPRINT, kernels))
    for name, fp in dict(zip(zip(names, map(id, fps)), zip(names, fps))).values():
        if fp is not None:
            key = (name, fp.threads, fp.regs)
            ref[key] = min(ref.get(key, fp.smem), fp.smem)
    return ref


def pad_bytes(kernel: KernelEvent, reference: dict[FootprintKey, int]) -> int:
    """Shared memory above the reference for the same kernel and block shape (0 when unknown)."""
    key = _key(kernel)
    return kernel.footprint.smem - reference[key] if key in reference else 0


def padding_reference(kernels: Sequence[KernelEvent],
                      baseline: Sequence[KernelEvent] | None) -> dict[FootprintKey, int]:
    """The baseline's footprints where it ran the same kernel, else the smallest seen here."""
    return smem_reference(kernels) | (smem_reference(baseline) if baseline else {})


def reference_for(trace: Trace, baseline: Trace | None) -> dict[FootprintKey, int]:
    """Padding reference of a rank's analysed kernels (see padding_reference)."""
    return padding_reference(analysed_kernels(trace), analysed_kernels(baseline) if baseline else None)


@dataclass(frozen=True)
class KernelStats:
    """One kernel (name and block shape) of one rank: time, footprint, padding, residency."""

    name: str
    kind: str
    launches: int
    total_us: float
    mean_us: float
    threads: int | None
    regs: int | None
    smem_bytes: int | None  # the largest seen
    pad_bytes: int  # largest shared memory above the reference
    padded_launches: int
    blocks_per_sm_kineto: float | None  # Kineto's 'blocks per SM' (grid / SMs), mean
    resident_blocks_before: int | None  # per SM, occupancy model, at the reference footprint
    resident_blocks_after: int | None  # per SM, at the padded footprint


def kernel_stats(
    kernels: Sequence[KernelEvent], reference: dict[FootprintKey, int], device: DeviceLimits | None
) -> list[KernelStats]:
    """Per-kernel table, longest total time first."""
    groups: dict[tuple, list[KernelEvent]] = defaultdict(list)
    for k in kernels:
        groups[(k.name, k.kind, _key(k))].append(k)
    out = []
    for (name, kind, key), ks in groups.items():
        # pad_bytes of each launch, the group's key looked up once
        pads = [k.footprint.smem - ref for k in ks] if (ref := reference.get(key)) is not None else [0] * len(ks)
        widest = max(ks, key=lambda k: k.footprint.smem if k.footprint else -1)
        fp = widest.footprint
        bps = [k.blocks_per_sm for k in ks if k.blocks_per_sm is not None]
        total = sum(k.dur for k in ks)
        out.append(KernelStats(
            name=name, kind=kind.value, launches=len(ks), total_us=total, mean_us=total / len(ks),
            threads=fp.threads if fp else None, regs=fp.regs if fp else None,
            smem_bytes=fp.smem if fp else None, pad_bytes=max(pads), padded_launches=sum(p > 0 for p in pads),
            blocks_per_sm_kineto=sum(bps) / len(bps) if bps else None,
            resident_blocks_before=_resident(device, fp, -max(pads)) if fp else None,
            resident_blocks_after=_resident(device, fp, 0) if fp else None,
        ))
    return sorted(out, key=lambda s: -s.total_us)


def _resident(device: DeviceLimits | None, fp, delta: int) -> int | None:
    if device is None:
        return None
    try:
        return occupancy(device, fp.padded(delta)).blocks
    except UsageError:
        return None


# --- per-rank metrics: one table (METRICS), read by the JSON, the per-strategy values, the report and the terminal ---


@dataclass(frozen=True)
class RankTimes:
    """One rank's analysed kernels, merged per class: what every metric of METRICS is computed from."""

    kernels: tuple[KernelEvent, ...]
    baseline: tuple[KernelEvent, ...] | None  # the baseline's analysed kernels of the same rank
    compute: list[Interval]
    communication: list[Interval]
    memory: list[Interval]
    busy: list[Interval]  # any GPU activity
    padded: tuple[KernelStats, ...]  # the kernels with padded launches

    @classmethod
    def of(cls, trace: Trace, baseline: Trace | None) -> RankTimes:
        kernels = analysed_kernels(trace)
        stats = kernel_stats(kernels, reference_for(trace, baseline), device_limits(trace.device))
        spans: dict[KernelClass, list[Interval]] = {kind: [] for kind in KernelClass}  # one pass for the classes
        for k in kernels:
            spans[k.kind].append((k.ts, k.ts + k.dur))  # KernelEvent.end without its call
        merged = {kind: merge(s) for kind, s in spans.items()}
        return cls(
            kernels=kernels,
            baseline=analysed_kernels(baseline) if baseline else None,
            compute=merged[KernelClass.COMPUTE],
            communication=merged[KernelClass.COMMUNICATION],
            memory=merged[KernelClass.MEMORY],
            busy=merge(chain(*merged.values())),  # every kernel is of one class: the union of their unions
            padded=tuple(s for s in stats if s.padded_launches),
        )

    @cached_property
    def compute_us(self) -> float:
        return length(self.compute)

    @cached_property
    def communication_us(self) -> float:
        return length(self.communication)

    @cached_property
    def overlap_us(self) -> float:
        return intersection(self.compute, self.communication)

    @property
    def exposed_us(self) -> float:
        return self.communication_us - self.overlap_us

    @property
    def span_us(self) -> float:
        return self.busy[-1][1] - self.busy[0][0] if self.busy else 0.0

    def slowdown(self, kind: KernelClass) -> float | None:
        return slowdown(self.kernels, self.baseline, kind) if self.baseline else None


@dataclass(frozen=True)
class Judged:
    """What the metrics marked `judged` read: the rank's diagnosis, which needs every rank's first pass (skew)."""

    diagnosis: RankDiagnosis  # why collectives started late, and the scheduling headroom (analysis.contention)

    @cached_property
    def verdict(self) -> Verdict:
        return verdict([self.diagnosis])


Value = float | int | None


@dataclass(frozen=True)
class Column:
    """Where a metric shows in the tables."""

    position: int  # left to right, in the report's summary, the terminal table and the per-strategy values
    header: str  # the report's summary column
    short: str | None = None  # the terminal table's column (ms implied); None: not in the terminal table


@dataclass(frozen=True)
class Metric:
    """One per-rank metric, declared once: everything else (JSON, tables, per-strategy values, plots) reads it."""

    key: str  # JSON key and RankMetrics attribute
    label: str  # in words, for plots
    unit: str  # of the JSON value: "us" (shown in ms), "ms", "%", "x" (a ratio) or "" (a count)
    fmt: str  # format spec of the shown value (after us -> ms)
    value: Callable[[RankTimes], Value]  # of a Judged where `judged`
    combine: Callable[[list], Value] | None = None  # a strategy's ranks into one value (mean, max, sum); None: not
    column: Column | None = None  # None: in JSON only
    judged: bool = False  # read off the diagnosis (Judged), after the cross-rank pass; else off the trace (RankTimes)

    def show(self, value: Value) -> str:
        """As the tables show it: '-' for None, times in ms."""
        if value is None:
            return "-"
        return format(value / 1000 if self.unit == "us" else value, self.fmt)


def mean(values: list) -> float:
    return sum(values) / len(values)


#: Every per-rank metric, in the JSON's order (kept as published in bench/results). A new metric is one
#: row here; docs/analysis.md says what each means.
METRICS: tuple[Metric, ...] = (
    Metric("kernels", "analysed kernels", "", "d", lambda r: len(r.kernels)),
    Metric("span_us", "span", "us", ".3f", lambda r: r.span_us, mean, Column(7, "span ms")),
    Metric("compute_us", "compute", "us", ".3f", lambda r: r.compute_us, mean, Column(5, "compute ms", "compute")),
    Metric("communication_us", "communication", "us", ".3f", lambda r: r.communication_us, mean,
           Column(2, "comm ms", "comm")),
    Metric("memory_us", "memory", "us", ".3f", lambda r: length(r.memory)),
    Metric("overlap_us", "overlap", "us", ".3f", lambda r: r.overlap_us),
    Metric("exposed_comm_us", "exposed communication", "us", ".3f", lambda r: r.exposed_us, mean,
           Column(3, "exposed comm ms", "exposed")),
    Metric("hideable_comm_us", "hideable communication", "us", ".3f",
           lambda r: min(r.exposed_us, r.compute_us - r.overlap_us), mean, Column(4, "hideable ms")),
    Metric("idle_us", "idle", "us", ".3f", lambda r: r.span_us - length(r.busy), mean, Column(6, "idle ms", "idle")),
    Metric("comp_comm_overlap_pct", "comp/comm overlap", "%", ".2f",
           lambda r: 100.0 * r.overlap_us / r.communication_us if r.communication_us > 0 else None, mean,
           Column(1, "overlap %", "overlap%")),
    Metric("compute_slowdown", "compute slowdown", "x", ".3f", lambda r: r.slowdown(KernelClass.COMPUTE), mean,
           Column(8, "compute slowdown", "comp x")),
    Metric("comm_slowdown", "communication slowdown", "x", ".3f", lambda r: r.slowdown(KernelClass.COMMUNICATION),
           mean, Column(9, "comm slowdown", "comm x")),
    Metric("padded_launches", "padded launches", "", "d", lambda r: sum(s.padded_launches for s in r.padded),
           column=Column(10, "padded launches", "padded")),
    Metric("scheduling_headroom_ms", "scheduling headroom", "ms", ".3f", lambda r: r.verdict.headroom_ms, mean,
           Column(11, "headroom ms"), judged=True),
    Metric("compute_slowdown_beside_comm", "compute slowdown beside communication", "x", ".3f",
           lambda r: r.diagnosis.compute_slowdown_beside_comm, mean, Column(12, "compute x beside comm"), judged=True),
    Metric("lever_headroom_ms", "headroom a lever reaches", "ms", ".3f", lambda r: r.verdict.lever_headroom_ms, mean,
           Column(13, "lever headroom ms"), judged=True),
)


def metric(key: str) -> Metric:
    return next(m for m in METRICS if m.key == key)


def shown(terminal: bool = False, baseline: bool = True) -> list[Metric]:
    """The metrics the report's summary (or, with `terminal`, the terminal table) shows, left to right; padded
    launches only with a `baseline`, which says what a kernel's unpadded footprint is."""
    cols = sorted((m for m in METRICS if m.column and (baseline or m.key != "padded_launches")),
                  key=lambda m: m.column.position)
    return [m for m in cols if m.column.short] if terminal else cols


@dataclass(frozen=True)
class RankMetrics:
    """One rank's values of METRICS (times in microseconds, over its analysed kernels), its padded kernels,
    why its collectives started late (the diagnosis) and what to do about it (the verdict)."""

    strategy: str
    rank: int
    file: str
    values: dict[str, Value]  # METRICS key -> value, in METRICS order
    padded_kernels: tuple[KernelStats, ...]
    diagnosis: RankDiagnosis
    verdict: Verdict
    findings: tuple[Finding, ...] = ()  # known misconfigurations (analysis.rules)
    alone_us: Mapping[int, float] | None = None  # the trace's measured times alone (Trace.alone_us)

    def __getattr__(self, key: str) -> Value:
        """r.compute_us: a metric's value."""
        try:
            return self.__dict__["values"][key]
        except KeyError:
            raise AttributeError(key) from None

    def row(self, metrics: Sequence[Metric]) -> list[str]:
        """Strategy, rank and the metrics as the tables show them."""
        return [self.strategy, str(self.rank), *(m.show(self.values[m.key]) for m in metrics)]

    def to_dict(self, rows: bool = True) -> dict:
        """Everything of the rank; without `rows`, the per-collective and per-step rows (the bulk of a long trace's
        JSON) are left out and only counted."""
        d = self.diagnosis
        return {"strategy": self.strategy, "rank": self.rank, "file": self.file, **self.values,
                "padded_kernels": [dataclasses.asdict(s) for s in self.padded_kernels],
                **({"comm_kernels": [c.to_dict() for c in d.comm]} if rows else {"comm_kernel_count": len(d.comm)}),
                "exposed_comm_breakdown_ms": d.exposed_ms,
                "headroom_by_mechanism_ms": self.verdict.by_mechanism_ms,
                **({"steps": [{"name": s.name, "span_us": s.span_us, "headroom_us": s.headroom_us,
                               "lever_headroom_us": 1000 * ms}
                              for s, ms in zip(d.steps, self.verdict.lever_steps_ms or [0.0] * len(d.steps),
                                               strict=True)]}
                   if rows else {"step_count": len(d.steps)}),
                "recommendations": [r.to_dict() for r in self.verdict.recommendations],
                "verdict": self.verdict.line,
                "findings": [f.to_dict() for f in self.findings],
                "launch_marks": d.launches.to_dict() if d.launches else None,
                "lever_marks": levers.marks_seen(d.launches) if d.launches else None,
                "alone_us": None if self.alone_us is None else {str(c): us for c, us in self.alone_us.items()},
                "typical_steps": list(self.verdict.typical),
                "left_out_steps": [{"step": s, "reason": why} for s, why in self.verdict.left_out],
                "compute_slowed": [s.to_dict() for s in d.compute_slowed]}


def rank_metrics(strategy: str, trace: Trace, baseline: Trace | None = None,
                 diagnosis: RankDiagnosis | None = None) -> RankMetrics:
    """One rank's metrics; `diagnosis` (contention.diagnose over all the run's ranks, for skew) else this rank's
    alone."""
    if diagnosis is None:
        diagnosis = diagnose({trace.rank: trace})[trace.rank]
    return measure(strategy, trace, baseline, diagnosis).judge(diagnosis)


@dataclass(frozen=True)
class Measured:
    """One rank's metrics as far as its own trace tells (all but the judged ones): compact, without the trace,
    what a worker process returns (analysis.parallel)."""

    strategy: str
    rank: int
    file: str
    values: dict[str, Value]  # the METRICS that are not judged
    padded_kernels: tuple[KernelStats, ...]
    findings: tuple[Finding, ...]
    alone_us: Mapping[int, float] | None

    def judge(self, diagnosis: RankDiagnosis) -> RankMetrics:
        """With the rank's diagnosis (after the cross-rank pass), every metric and the verdict."""
        judged = Judged(diagnosis)
        values = {m.key: m.value(judged) if m.judged else self.values[m.key] for m in METRICS}
        return RankMetrics(self.strategy, self.rank, self.file, values, self.padded_kernels, diagnosis,
                           judged.verdict, self.findings, self.alone_us)


Timed = tuple[dict[str, Value], tuple[KernelStats, ...], float]


def timed(trace: Trace, baseline: Trace | None, times: RankTimes | None = None) -> Timed:
    """What the rank's times give, which no diagnosis changes: the METRICS that are not judged, the padded kernels,
    the overlap (us). `times`: RankTimes.of(trace, baseline), where already made."""
    times = times or RankTimes.of(trace, baseline)
    return {m.key: m.value(times) for m in METRICS if not m.judged}, times.padded, times.overlap_us


def measure(strategy: str, trace: Trace, baseline: Trace | None, diagnosis: RankDiagnosis,
            times: Timed | None = None) -> Measured:
    """The trace's part of `rank_metrics`; `diagnosis` may be the rank's provisional one (contention.Pending): the
    rules read only what the rank's own trace tells of its collectives. `times`: `timed`'s, where another process
    computed it."""
    values, padded, overlap_us = times or timed(trace, baseline)
    return Measured(strategy, trace.rank, printable(trace.path), values, padded,
                    findings(trace, diagnosis, overlap_us, diagnosis.process.env if diagnosis.process else None),
                    trace.alone_us)


def strategy_verdict(ranks: Sequence[RankMetrics]) -> Verdict:
    """The verdict on one strategy's ranks. A strategy of one rank has its rank's, already made: the same function
    of the same diagnosis, made again, was 0.1 s of the 157 MB trace's analysis (measured)."""
    return ranks[0].verdict if len(ranks) == 1 else verdict([r.diagnosis for r in ranks])


def strategy_values(ranks: Sequence[RankMetrics]) -> dict[str, dict[str, Value]]:
    """Strategy -> its rank count and each combined metric over its ranks (None where no rank has it)."""
    combined = [m for m in shown() if m.combine] + [m for m in METRICS if m.combine and not m.column]
    out: dict[str, dict[str, Value]] = {}
    for name in dict.fromkeys(r.strategy for r in ranks):
        mine = [r for r in ranks if r.strategy == name]
        out[name] = {"ranks": len(mine)}
        for m in combined:
            vals = [v for r in mine if (v := r.values[m.key]) is not None]
            out[name][m.key] = m.combine(vals) if vals else None
    return out


def slowdown(kernels: Sequence[KernelEvent], baseline: Sequence[KernelEvent], kind: KernelClass) -> float | None:
    """Time of this run's kernels of `kind` over what the same kernels took on average in the baseline.

    Matching by name and comparing per-launch means makes runs with different
    step counts comparable; kernels the baseline never ran are left out.
    """
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for k in of_kind(baseline, kind):
        sums[k.name][0] += k.dur
        sums[k.name][1] += 1
    mean = {name: total / n for name, (total, n) in sums.items()}
    mine = [k for k in of_kind(kernels, kind) if k.name in mean]
    expected = sum(mean[k.name] for k in mine)
    return sum(k.dur for k in mine) / expected if expected > 0 else None


@dataclass(frozen=True)
class ExposedComm:
    kernel: KernelEvent
    exposed_us: float  # of its duration, the part no compute kernel ran beside


def exposed_intervals(kernels: Sequence[KernelEvent]) -> list[Interval]:
    """When communication ran with no compute beside it."""
    return subtract(_merged(of_kind(kernels, KernelClass.COMMUNICATION)),
                    _merged(of_kind(kernels, KernelClass.COMPUTE)))


def exposed_comm(kernels: Sequence[KernelEvent]) -> list[ExposedComm]:
    """Each communication kernel's exposed time, most exposed first."""
    comp = _merged(of_kind(kernels, KernelClass.COMPUTE))
    starts = [s for s, _ in comp]
    out = [ExposedComm(k, k.dur - covered((k.ts, k.end), comp, starts))
           for k in of_kind(kernels, KernelClass.COMMUNICATION)]
    return sorted(out, key=lambda e: -e.exposed_us)
