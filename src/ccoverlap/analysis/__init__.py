"""Trace analysis: why a step is slow, and whether the overlap controls did what they claim.

Traces are parsed once into a small model (`trace`), analyses are pure
functions of it (`metrics`), pictures (`plots`) and the report (`report`) are
separate and import matplotlib only when asked for.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ccoverlap.analysis.metrics import RankMetrics, analysed_kernels, rank_metrics, unlaunched
from ccoverlap.analysis.trace import Classifier, Problem, Trace, discover, read_traces
from ccoverlap.errors import UsageError


@dataclass(frozen=True)
class Analysis:
    strategies: dict[str, dict[int, Trace]]  # strategy -> rank -> trace (strategies with a usable trace)
    baseline: dict[int, Trace] | None
    ranks: list[RankMetrics]
    problems: list[Problem]


def analyze(root: Path, baseline: Path | None = None, comm_regex: str | None = None) -> Analysis:
    """Read every trace under ROOT (one strategy per folder) and compute the per-rank metrics."""
    classifier = Classifier.with_user_regex(comm_regex)
    found = discover(root)
    problems: list[Problem] = []
    strategies: dict[str, dict[int, Trace]] = {}
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
        if traces:
            strategies[name] = traces
    base = None
    if baseline is not None:
        base = _baseline(baseline, found, strategies, classifier, problems)
    ranks = [
        rank_metrics(name, trace, base.get(rank) if base else None)
        for name, traces in strategies.items()
        for rank, trace in traces.items()
    ]
    return Analysis(strategies, base, ranks, problems)


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
