"""Trace analysis: why a step is slow, and whether the overlap controls did what they claim.

Traces are parsed once (`reader`) into a small model (`model`), analyses are pure
functions of it (`metrics`), pictures (`plots`) and the report (`report`) are
separate and import matplotlib only when asked for. A trace with an alone window
beside it (named as `util.tracefiles` says; the doctor passes its own in, `Process.alone`)
gets each launch's time alone from it (`alone`). Each file's first pass (read, alone window, the rank's
own analysis) returns a compact `Part`; with `jobs` > 1 worker processes run
them (`parallel`), each part kept packed (pickled, compressed) until every file is read, and the
cross-rank pass (skew, the fewest time alone of a collective) runs on the parts. This package
imports nothing of the commands that use it (doctor, whatif, tune).

The front, what `ccoverlap analyze`, the doctor, the what-if simulator, the tuner and a notebook use:
  analyze(root, ...) -> Analysis   every trace under a folder, per-rank metrics and diagnoses
  Process                          what is known of a rank's process besides its trace (the doctor's)
  read_trace(path) -> Trace        one trace file, its kernels classified (KernelClass, KernelEvent)
  analysed_indices(trace)          the kernels of the analysed steps; windows(trace, idx): them, step by step
  graph(trace)                     the launches' dependencies (stream order, events)
  device_limits(props), short_name the trace's GPU as a DeviceLimits; a kernel's short name
  verdict(diagnoses)               what to do about the diagnoses of a strategy's ranks (NOTHING_TO_GAIN_PCT)
Showing an analysis (JSON, table, HTML report) is `analysis.summary`.
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import NamedTuple

from ccoverlap.analysis.alone import Match, with_alone
from ccoverlap.analysis.contention import Pending, Steps, across_ranks, beside, first_pass, windows
from ccoverlap.analysis.intervals import Interval
from ccoverlap.analysis.deps import graph
from ccoverlap.analysis.metrics import Measured, RankMetrics, RankTimes, Timed, measure, timed
from ccoverlap.analysis.recommend import NOTHING_TO_GAIN_PCT, verdict
from ccoverlap.analysis.steps import Shape, shapes
from ccoverlap.analysis.model import (Classifier, KernelClass, KernelEvent, Trace, analysed_indices, analysed_kernels,
                                      device_limits, short_name, unlaunched)
from ccoverlap.analysis.reader import (Problem, discover, grouped, no_cyclic_gc, printable, read_trace, read_traces,
                                       trace_limit)
from ccoverlap.analysis import graphs, parallel
from ccoverlap.analysis.process import Process
from ccoverlap.util import lifetime
from ccoverlap.util.errors import UsageError
from ccoverlap.util.output import Progress
from ccoverlap.util.tracefiles import alone_trace

__all__ = ["NOTHING_TO_GAIN_PCT", "Analysis", "KernelClass", "KernelEvent", "Problem", "Process", "Trace",
           "analysed_indices", "analyze", "device_limits", "graph", "read_trace", "short_name", "verdict", "windows"]


@dataclass(frozen=True)
class Analysis:
    # strategy -> rank -> trace (strategies with a usable trace); kept only where asked (keep_traces: the report
    # draws each rank's kernels), else empty
    strategies: dict[str, dict[int, Trace]]
    baseline: dict[int, Trace] | None
    ranks: list[RankMetrics]
    problems: list[Problem]
    missing_ranks: dict[str, list[int]]  # strategy -> ranks of its world with no usable trace (only where some are)
    alone: dict[tuple[str, int], Match] = field(default_factory=dict)  # (strategy, rank) -> its alone window matched
    files: dict[str, dict[int, Path]] = field(default_factory=dict)  # strategy -> rank -> the file analysed


@dataclass(frozen=True)
class Task:
    """One trace file's first pass, as a worker process gets it."""

    strategy: str
    path: Path
    comm_regex: str | None  # (a Classifier holds a compiled regex, which does not pickle)
    comm_cluster: int | None
    processes: Mapping[int, Process] | None  # rank -> what the doctor knows of its process (ROOT's own traces)
    baseline: Mapping[int, Trace] | None  # rank -> the baseline's trace (in one process only: see analyze)
    keep_trace: bool
    read: Trace | None = None  # this file as the baseline already read it (in one process only): not read again
    limit: int | None = None  # the largest decompressed trace read, in bytes (reader.trace_limit)
    # a core is free for this file: a large one is read in two processes (reader.read_trace), and its trace-only
    # part is computed beside the rest of its first pass (_Ahead)
    split: bool = False


@dataclass(frozen=True)
class Part:
    """One trace file's first pass, compact: what the cross-rank pass and the output need of it."""

    path: Path
    mb: float  # the file's size (MB), for the progress line
    rank: int | None = None  # None: unusable (`skipped` says why)
    world_size: int | None = None
    skipped: Problem | None = None
    notes: tuple[Problem, ...] = ()  # the reader's
    unlaunched: Problem | None = None
    empty: bool = False  # no kernel launched before the last profiler step: skipped
    alone: tuple[Problem, ...] = ()  # its alone window's notes
    match: Match | None = None
    pending: Pending | None = None
    measured: Measured | None = None
    trace: Trace | None = None  # where kept


def first(task: Task) -> Part:
    """Read one trace and analyse its rank as far as the rank alone tells (its alone window included). Its trace
    model is left to the program's exit to free where the program ends at once (util/lifetime.keep)."""
    lifetime.keep(None)  # the one held before, freed before this one is read
    path, classifier = task.path, _classifier(task.comm_regex)
    try:
        mb = path.stat().st_size / 1e6
    except OSError:
        mb = 0.0
    try:
        trace = task.read or read_trace(path, classifier, task.limit, task.split)
    except UsageError as exc:
        return Part(path, mb, skipped=Problem(path, f"skipped: {exc}"))
    notes = tuple(Problem(path, note) for note in trace.notes)
    if why := trace.left_out.withheld():  # a verdict only from input that was read
        return Part(path, mb, skipped=Problem(path, f"skipped, no verdict: {why}"), notes=notes)
    gap = None
    if missing := unlaunched(trace):
        kinds = ", ".join(sorted({k.kind.value for k in missing}))
        gap = Problem(path, f"{len(missing)} GPU kernel(s) ({kinds}) have no launch call in the trace: left out, "
                      "as HTA leaves them out")
    if not analysed_kernels(trace):
        return Part(path, mb, trace.rank, trace.world_size, notes=notes, unlaunched=gap, empty=True)
    alone: list[Problem] = []
    process = (task.processes or {}).get(trace.rank)
    if process and process.graphs:  # before the alone window: a graph's serial twin is matched by its topology
        topologies, bad = graphs.parse(process.graphs)
        trace = dataclasses.replace(trace, graphs=topologies)
        if bad:
            notes += (Problem(path, f"{bad} captured CUDA graph topolog(ies) malformed: left out"),)
    trace, match = _with_alone(trace, classifier, alone, task.limit, process.alone if process else None)
    if process and process.graphs_skipped:
        notes += (Problem(path, f"{len(process.graphs_skipped)} CUDA graph(s) the program captured were not read "
                          f"(first: {process.graphs_skipped[0]}): a replay of one on several streams keeps its "
                          "waits unknown"),)
    base = task.baseline.get(trace.rank) if task.baseline else None
    if task.split and len(trace.kernels) > AHEAD_KERNELS:  # a core is free: the trace-only part beside the rest
        ahead = _Ahead(trace, base)
        try:
            pending = first_pass(trace, task.comm_cluster, process, ahead)
            measured = measure(task.strategy, trace, base, pending.provisional(), ahead.timed())
        finally:
            ahead.forked.cancel()
    else:
        pending = first_pass(trace, task.comm_cluster, process)
        measured = measure(task.strategy, trace, base, pending.provisional())
    lifetime.keep(trace)
    return Part(path, mb, trace.rank, trace.world_size, None, notes, gap, False, tuple(alone), match, pending,
                measured, trace if task.keep_trace else None)


#: Kernels past which a rank's first pass, where a core is free, computes its trace-only part in a second process
#: (below, the fork and the pickling cost more than they save).
AHEAD_KERNELS = 20_000


def _trace_only(trace: Trace, base: Trace | None) -> Iterator:
    """What a rank's first pass needs of its trace alone, as the process forked for it sends it (_Ahead): first the
    steps (steps.windows), which the rest of the first pass reads early, then what _of_steps gives."""
    yield (steps := windows(trace, analysed_indices(trace)))
    yield _of_steps(trace, base, steps)


def _of_steps(trace: Trace, base: Trace | None,
              steps: Steps) -> tuple[tuple[Shape, ...], tuple[list[Interval], list[int]], Timed]:
    """The steps' shapes, the compute beside communication (contention.beside, from the merged intervals the times
    have) and what the rank's times give."""
    times = RankTimes.of(trace, base)
    return tuple(shapes(trace, steps)), beside(trace, (times.compute, times.communication)), timed(trace, base, times)


class _Ahead:
    """_trace_only computed in a process forked from this one while this one diagnoses the rank, the steps first
    (this one reads them once its dependency graph is made); what that process did not send is computed here."""

    def __init__(self, trace: Trace, base: Trace | None):
        self.trace, self.base = trace, base
        self.forked = parallel.Forked(partial(_trace_only, trace, base))
        self.found: Steps | None = None
        self.got: tuple | None = None

    @property
    def steps(self) -> Steps:
        if self.found is None:
            self.found = self.forked.result() or windows(self.trace, analysed_indices(self.trace))
        return self.found

    def _get(self) -> tuple:
        if self.got is None:
            steps = self.steps  # the first answer, read before the rest
            self.got = self.forked.result() or _of_steps(self.trace, self.base, steps)
        return self.got

    def shapes(self) -> tuple[Shape, ...]:
        return self._get()[0]

    def beside(self) -> tuple[list[Interval], list[int]]:
        return self._get()[1]

    def timed(self) -> Timed:
        return self._get()[2]

class _Packed(NamedTuple):
    """A worker's Part as it comes back and waits in the parent for the cross-rank pass: pickled and compressed
    (a Part of 150 MB of trace holds 14 MB unpickled, 1.1 MB packed; the parent holds every rank's while the
    workers still read, and at 32 ranks those alone took it past 1 GB). Path and MB for the progress line."""

    path: Path
    mb: float
    blob: bytes

    def unpack(self) -> Part:
        return pickle.loads(zlib.decompress(self.blob))


def _first_packed(task: Task) -> _Packed:
    """`first` in a worker process, its Part packed."""
    part = first(task)
    return _Packed(part.path, part.mb, zlib.compress(pickle.dumps(part, pickle.HIGHEST_PROTOCOL), 1))


@cache
def _classifier(comm_regex: str | None) -> Classifier:
    return Classifier.with_user_regex(comm_regex)


@no_cyclic_gc()  # here, in the workers forked from here, and across the ranks
def analyze(root: Path, baseline: Path | None = None, comm_regex: str | None = None,
            comm_cluster: int | None = None, processes: Mapping[int, Process] | None = None, jobs: int = 1,
            keep_traces: bool = True, progress: bool = False, max_trace_mb: float = 0.0) -> Analysis:
    """Read every trace under ROOT (one strategy per folder) and compute the per-rank metrics and diagnoses.

    `comm_cluster`: the communication kernels' cluster size, where the caller knows it; `processes`: rank -> what
    the doctor knows of that rank's process (what the launch interposer saw it launch, its variables; for ROOT's
    own traces). The traces record neither: without them NCCL's default cluster is assumed, and said.
    `jobs`: worker processes for the first passes (1: this process). A baseline, and traces kept, need every
    rank's model in this process: with either, the first passes run here; so does one file's (a worker would
    only pickle its part back). Where `jobs` gives two cores a file read at once, a large file's first pass
    takes the second (Task.split). `progress`: files done and MB/s on
    stderr (util.output.Progress: a bar on a terminal, else a line every few seconds). `max_trace_mb`: the
    largest decompressed trace read (0: reader.trace_limit's share of the memory per worker).
    """
    classifier = _classifier(comm_regex)
    problems: list[Problem] = []
    found = discover(root, problems)
    files = [(name, path) for name, paths in found.items() for path in paths]
    in_process = jobs <= 1 or len(files) == 1 or baseline is not None or keep_traces
    split = jobs >= 2 * (1 if in_process else len(files))  # two cores for each file read at once
    # the memory's share per core where jobs share it: a single file read here with a second core too
    limit = trace_limit(1 if jobs <= 1 or baseline is not None or keep_traces else jobs, max_trace_mb)
    base, base_problems = (_baseline(baseline, found, classifier, limit) if baseline is not None else (None, []))
    read = {t.path: t for t in (base or {}).values()}  # a baseline folder that is also analysed is read once
    own = printable(root.name)
    tasks = [(name, Task(name, path, comm_regex, comm_cluster, processes if name == own else None, base, keep_traces,
                         read.get(path), limit, split)) for name, path in files]
    with _Pace(len(tasks), progress) as pace:
        if in_process:
            parts = [pace(first(task)) for _, task in tasks]
        else:
            try:
                packed = parallel.run(_first_packed, [task for _, task in tasks], jobs, pace)
            except parallel.WorkerDied as exc:
                raise UsageError(f"a worker process died reading {printable(exc.task.path)}: {exc.why}; nothing "
                                 "was written") from None
            parts = [p.unpack() for p in packed]
            del packed
    by_strategy: dict[str, list[Part]] = {}
    for (name, _), part in zip(tasks, parts, strict=True):
        by_strategy.setdefault(name, []).append(part)
    alone_matches: dict[tuple[str, int], Match] = {}
    strategies: dict[str, dict[int, Part]] = {}
    absent: dict[str, list[int]] = {}
    for name, mine in by_strategy.items():
        ranks = _ranks(mine, problems)
        for rank, part in list(ranks.items()):
            if part.unlaunched:
                problems.append(part.unlaunched)
            if part.empty:
                problems.append(Problem(part.path, "skipped: no GPU kernel launched before the last profiler step"))
                del ranks[rank]
        for rank, part in ranks.items():
            problems += part.alone
            if part.match is not None:
                alone_matches[(name, rank)] = part.match
        if ranks:
            strategies[name] = ranks
            if gap := missing_ranks(ranks):
                absent[name] = gap
                problems.append(Problem(mine[0].path.parent,
                                        f"missing rank(s) {_spans(gap)} (of 0-{_world(ranks) - 1}): "
                                        "no usable trace, left out of every figure"))
    problems += base_problems
    results = []
    for name, ranks in strategies.items():
        diagnoses = across_ranks({rank: part.pending for rank, part in ranks.items()})
        for rank, part in ranks.items():
            problems += [Problem(part.path, note) for note in diagnoses[rank].notes]
            results.append(part.measured.judge(diagnoses[rank]))
    kept = {name: {rank: part.trace for rank, part in ranks.items()} for name, ranks in strategies.items()} \
        if keep_traces else {}
    return Analysis(kept, base, results, problems, absent, alone_matches,
                    {name: {rank: part.path for rank, part in ranks.items()} for name, ranks in strategies.items()})


class _Pace:
    """Files done and MB/s read so far, on stderr where asked."""

    def __init__(self, total: int, show: bool):
        self.bar = Progress("analyze", total) if show else None
        self.mb, self.started = 0.0, time.monotonic()

    def __enter__(self) -> _Pace:
        if self.bar:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar:
            self.bar.__exit__(*exc)

    def __call__(self, part: Part | _Packed) -> Part | _Packed:
        self.mb += part.mb
        if self.bar:
            rate = self.mb / max(time.monotonic() - self.started, 1e-9)
            self.bar.advance(f"{part.path.name}, {self.mb:.0f} MB at {rate:.0f} MB/s")
        return part


def _ranks(parts: list[Part], problems: list[Problem]) -> dict[int, Part]:
    """One strategy's usable parts by rank, in file order; unusable files and duplicate ranks become problems."""
    ranks: dict[int, Part] = {}
    for part in parts:
        problems += part.notes
        if part.skipped is not None:
            problems.append(part.skipped)
            continue
        if part.rank in ranks:
            problems.append(Problem(part.path, f"skipped: rank {part.rank} again (already read from "
                                    f"{ranks[part.rank].path.name})"))
            continue
        ranks[part.rank] = part
    return dict(sorted(ranks.items()))


def _with_alone(trace: Trace, classifier: Classifier, problems: list[Problem],
                limit: int | None, path: Path | None = None) -> tuple[Trace, Match | None]:
    """`trace` with its launches' times alone from its alone window (one line where it is bad): `path`, the one the
    doctor recorded, else the one beside the trace by its name (util.tracefiles), where either exists."""
    path = path or alone_trace(trace.path)
    try:
        os.stat(path)
    except FileNotFoundError:
        return trace, None
    except OSError:
        pass  # read_trace says what
    try:
        alone = read_trace(path, classifier, limit)
    except UsageError as exc:
        problems.append(Problem(path, f"alone window skipped: {exc}"))
        return trace, None
    problems += [Problem(path, f"alone window: {line}") for line in alone.notes if line.startswith("left out")]
    trace, m = with_alone(trace, alone)
    if note := m.note():
        problems.append(Problem(path, note))
    return trace, m


def _world(ranks: Mapping[int, Part]) -> int:
    """Ranks the job had: distributedInfo's world size, else (or if smaller) the highest rank read + 1."""
    return max([p.world_size for p in ranks.values() if p.world_size] + [max(ranks) + 1])


def missing_ranks(ranks: Mapping[int, Part]) -> list[int]:
    """The ranks of the job with no usable trace: absent, unreadable, or with nothing to analyse."""
    return [r for r in range(_world(ranks)) if r not in ranks]


def _spans(ranks: list[int]) -> str:
    """1, 3, 5-7: sorted ranks with runs joined, so a job of thousands of ranks stays one line."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _baseline(path: Path, found: dict, classifier: Classifier, limit: int) -> tuple[dict[int, Trace], list[Problem]]:
    """The baseline's traces by rank, and its problems; where it is one of the analysed folders (read again then,
    without its alone windows, which no baseline figure reads), the ranks that folder analyses, and no problems
    (that folder's own say them)."""
    bad: list[Problem] = []
    runs = discover(path, bad)
    if len(runs) > 1:
        raise UsageError(f"--baseline {path} holds several strategies ({', '.join(runs)}): name one of its folders")
    (files,) = runs.values()
    traces, unread = read_traces(files, classifier, limit)
    bad += unread
    if not traces:  # every slowdown asked for would be missing: no analysis without the baseline it was given
        raise UsageError(f"--baseline {path}: no usable trace: {'; '.join(grouped(bad))}")
    if any([p.resolve() for p in ours] == [p.resolve() for p in files] for ours in found.values()):
        return {rank: t for rank, t in traces.items() if analysed_kernels(t)}, []  # as that folder's ranks
    return traces, [Problem(p.path, f"(baseline) {p.message}") for p in bad]
