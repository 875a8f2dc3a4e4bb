"""Trace analysis: why a step is slow, and whether the overlap controls did what they claim.

Traces are parsed once into a small model (`trace`), analyses are pure
functions of it (`metrics`), pictures (`plots`) and the report (`report`) are
separate and import matplotlib only when asked for. A trace with an alone window
beside it (the doctor's, `doctor.record.alone_trace`) gets each launch's time
alone from it (`alone`).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ccoverlap.doctor.analysis.alone import Match, with_alone
from ccoverlap.doctor.analysis.contention import diagnose
from ccoverlap.doctor.analysis.metrics import RankMetrics, rank_metrics
from ccoverlap.doctor.analysis.trace import (Classifier, Problem, Trace, analysed_kernels, discover, read_trace,
                                             read_traces, unlaunched)
from ccoverlap.doctor.record import alone_trace
from ccoverlap.util.errors import UsageError

if TYPE_CHECKING:
    from ccoverlap.doctor.record import Process


@dataclass(frozen=True)
class Analysis:
    strategies: dict[str, dict[int, Trace]]  # strategy -> rank -> trace (strategies with a usable trace)
    baseline: dict[int, Trace] | None
    ranks: list[RankMetrics]
    problems: list[Problem]
    missing_ranks: dict[str, list[int]]  # strategy -> ranks of its world with no usable trace (only where some are)
    alone: dict[tuple[str, int], Match] = field(default_factory=dict)  # (strategy, rank) -> its alone window matched


def analyze(root: Path, baseline: Path | None = None, comm_regex: str | None = None,
            comm_cluster: int | None = None, processes: Mapping[int, Process] | None = None) -> Analysis:
    """Read every trace under ROOT (one strategy per folder) and compute the per-rank metrics and diagnoses.

    `comm_cluster`: the communication kernels' cluster size, where the caller knows it; `processes`: rank -> what
    the doctor knows of that rank's process (what the launch interposer saw it launch, its variables; for ROOT's
    own traces). The traces record neither: without them NCCL's default cluster is assumed, and said."""
    classifier = Classifier.with_user_regex(comm_regex)
    found = discover(root)
    problems: list[Problem] = []
    alone_matches: dict[tuple[str, int], Match] = {}
    strategies: dict[str, dict[int, Trace]] = {}
    absent: dict[str, list[int]] = {}
    for name, files in found.items():
        traces, bad = read_traces(files, classifier)
        problems += bad
        for rank, trace in list(traces.items()):
            if missing := unlaunched(trace):
                kinds = ", ".join(sorted({k.kind.value for k in missing}))
                problems.append(Problem(trace.path, f"{len(missing)} GPU kernel(s) ({kinds}) have no launch call "
                                        "in the trace: left out, as HTA leaves them out"))
            if not analysed_kernels(trace):
                problems.append(Problem(trace.path, "skipped: no GPU kernel launched before the last profiler step"))
                del traces[rank]
        for rank, trace in list(traces.items()):
            traces[rank] = _with_alone(trace, classifier, problems, alone_matches, name)
        if traces:
            strategies[name] = traces
            if gap := missing_ranks(traces):
                absent[name] = gap
                problems.append(Problem(files[0].parent, f"missing rank(s) {_spans(gap)} (of 0-{_world(traces) - 1}): "
                                        "no usable trace, left out of every figure"))
    base = None
    if baseline is not None:
        base = _baseline(baseline, found, strategies, classifier, problems)
    ranks = []
    for name, traces in strategies.items():
        diagnoses = diagnose(traces, comm_cluster, processes if name == root.name else None)
        for rank, trace in traces.items():
            problems += [Problem(trace.path, note) for note in diagnoses[rank].notes]
            ranks.append(rank_metrics(name, trace, base.get(rank) if base else None, diagnoses[rank]))
    return Analysis(strategies, base, ranks, problems, absent, alone_matches)


def _with_alone(trace: Trace, classifier: Classifier, problems: list[Problem], matches: dict, strategy: str) -> Trace:
    """`trace` with its launches' times alone where its alone window lies beside it (one line where it is bad)."""
    path = alone_trace(trace.path)
    if not path.exists():
        return trace
    try:
        alone = read_trace(path, classifier)
    except UsageError as exc:
        problems.append(Problem(path, f"alone window skipped: {exc}"))
        return trace
    trace, m = with_alone(trace, alone)
    matches[(strategy, trace.rank)] = m
    if note := m.note():
        problems.append(Problem(path, note))
    return trace


def _world(traces: dict[int, Trace]) -> int:
    """Ranks the job had: distributedInfo's world size, else (or if smaller) the highest rank read + 1."""
    return max([t.world_size for t in traces.values() if t.world_size] + [max(traces) + 1])


def missing_ranks(traces: dict[int, Trace]) -> list[int]:
    """The ranks of the job with no usable trace: absent, unreadable, or with nothing to analyse."""
    return [r for r in range(_world(traces)) if r not in traces]


def _spans(ranks: list[int]) -> str:
    """1, 3, 5-7: sorted ranks with runs joined, so a job of thousands of ranks stays one line."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _baseline(path: Path, found: dict, strategies: dict, classifier: Classifier, problems: list) -> dict[int, Trace]:
    """The baseline's traces by rank; reused when the baseline is one of the analysed folders."""
    runs = discover(path)
    if len(runs) > 1:
        raise UsageError(f"--baseline {path} holds several strategies ({', '.join(runs)}): name one of its folders")
    (files,) = runs.values()
    for name, ours in found.items():
        if [p.resolve() for p in ours] == [p.resolve() for p in files]:
            return strategies.get(name, {})
    traces, bad = read_traces(files, classifier)
    problems += [Problem(p.path, f"(baseline) {p.message}") for p in bad]
    return traces
