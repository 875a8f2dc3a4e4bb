"""What each GPU activity of a rank waited for: its launch call, its stream, CUDA events.

One pass over the trace model gives the rank's dependency graph: kernel i could
start only after its launch call ended, after the previous activity of its stream,
and after the GPU work its stream waited for through a CUDA event. The last is
read from CUPTI's "Stream Wait Event" records (torch.profiler's
`enable_cuda_sync_events`), matched to the event-record call as docs/analysis.md
("Why a collective started late") describes. What cannot be resolved is listed,
never guessed silently: a kernel behind an unresolved wait has an `unknown`
dependency.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter

import msgspec

from ccoverlap.analysis import graphs
from ccoverlap.analysis.model import Call, KernelEvent, Trace
from ccoverlap.util.text import shorten

_CORRELATION, _END, _TS = attrgetter("correlation"), attrgetter("end"), attrgetter("ts")
_FIRST = itemgetter(0)
#: A producer ending this long (us) after its consumer started is not what the consumer waited for.
PLAUSIBLE_US = 1.0
#: Event records on the wait's thread looked at, the latest first, for one whose producer is plausible.
RECORDS_LOOKED_AT = 8
#: the unresolved reason of a kernel inside a CUDA graph replayed on several streams (recommend.py reads it)
GRAPH_EDGES_UNKNOWN = "its edges are not in the trace"
#: Why a wait could not be resolved (Unresolved's templates: {stream}, the waiting stream; {at}, the wait's time).
_NO_RECORD = "stream {stream} waited at {at:.3f} for an event recorded by no earlier call on its thread"
_NO_PRODUCER = "stream {stream} waited at {at:.3f} for an event recorded after no GPU work of its thread"
_NO_WAIT_RECORD = ("a cudaStreamWaitEvent at {at:.3f} has no Stream Wait Event record: which stream waited, and for "
                  "what, is unknown")
SYNC_EVENTS_HINT = ("record with torch.profiler's experimental_config=torch._C._profiler._ExperimentalConfig("
                    "enable_cuda_sync_events=True)")


class Unresolved(msgspec.Struct, frozen=True, gc=False):
    """Why a wait before a kernel could not be resolved, kept compact: a template shared by the waits of its kind,
    the stream and the wait's time. A rank has one for about every kernel after a stream wait, its diagnosis keeps
    them for each collective and a parent process holds every rank's (as text, 3 of the 26 MB a rank of 150 MB
    of trace held): the text is built only where it is shown (str). A struct, built in C (a NamedTuple's __new__
    is a Python call: 30,792 of them in the 157 MB trace)."""

    template: str  # the message, with {stream} and {at} where they go
    at: float = 0.0
    stream: int = -1

    def __str__(self) -> str:
        return self.template.format(at=self.at, stream=self.stream)


@dataclass(frozen=True)
class Graph:
    """Kernel i (an index of `kernels`, the trace's sorted activities) waits for `release[i]`,
    `prev[i]` and `events[i]`; `unresolved[i]` says why a wait before it could not be resolved."""

    kernels: tuple[KernelEvent, ...]
    release: list[float]  # its launch call's end, never after its start; its start without a launch call
    launched: list[bool]  # whether its launch call is in the trace
    prev: list[int]  # the previous activity on its stream (-1: none)
    events: dict[int, tuple[int, ...]]  # the activities its stream waited for through CUDA events
    unresolved: dict[int, tuple[Unresolved, ...]]
    notes: tuple[str, ...]  # what the reader should know: unresolved waits, fallbacks taken

    def ready(self, i: int) -> tuple[float, str]:
        """When kernel i could have started, and what it waited for last: launch, stream, event or trace
        (no launch call in the trace: its start). Never after its start."""
        k = self.kernels[i]
        ready, by = self.release[i], "launch" if self.launched[i] else "trace"
        for j, what in [(self.prev[i], "stream")] + [(p, "event") for p in self.events.get(i, ())]:
            if j >= 0 and self.kernels[j].end > ready:
                ready, by = self.kernels[j].end, what
        return min(ready, k.ts), by


class _Launches:
    """Activities ordered by their launch call's CPU start, per key (a stream or a CPU thread)."""

    def __init__(self):
        self.items: dict = defaultdict(list)  # key -> [(launch ts, item)]: add, then freeze

    def add(self, key, ts: float, i: int) -> None:
        self.items[key].append((ts, i))

    def freeze(self) -> _Launches:
        for items in self.items.values():
            items.sort()
        self._ts = {key: list(map(_FIRST, items)) for key, items in self.items.items()}
        return self

    def last_before(self, key, ts: float) -> int:
        at = bisect_left(self._ts.get(key, ()), ts)
        return self.items[key][at - 1][1] if at else -1

    def latest_before(self, key, ts: float, n: int) -> list[int]:
        """Up to `n` items launched before `ts`, the latest first."""
        at = bisect_left(self._ts.get(key, ()), ts)
        return [item for _, item in reversed(self.items[key][max(0, at - n):at])] if at else []

    def latest_where(self, key, ts: float, keep) -> int:
        """The latest item launched before `ts` for which `keep(item)` holds; -1: none."""
        at = bisect_left(self._ts.get(key, ()), ts)
        return next((item for _, item in reversed(self.items[key][:at]) if keep(item)), -1) if at else -1

    def first_after(self, key, ts: float) -> int:
        at = bisect_right(self._ts.get(key, ()), ts)
        items = self.items.get(key, ())
        return items[at][1] if at < len(items) else -1


def graph(trace: Trace) -> Graph:
    """The rank's dependency graph (see Graph), with every unresolved event wait listed."""
    kernels = trace.kernels
    calls: Sequence[Call | None] = trace.calls  # a kernel without a correlation (-1) has no launch call
    if min(map(_CORRELATION, kernels), default=0) < 0:
        calls = [c if k.correlation >= 0 else None for k, c in zip(kernels, calls)]
    # min(c.end, k.ts): in C where every kernel has its call (the usual trace)
    release = (list(map(min, map(_END, calls), map(_TS, kernels))) if None not in calls else
               [(ts if (ts := k.ts) < (end := c.end) else end) if c else k.ts
                for k, c in zip(kernels, calls, strict=True)])
    prev, last = [], {}
    for i, k in enumerate(kernels):
        prev.append(last.get(k.stream, -1))
        last[k.stream] = i
    # Launch order per stream (the Stream Wait Event records' matching needs it) and per thread (theirs, and a
    # stream-wait call's without a record), and the event records by thread and event: each built only where
    # what reads it is in the trace (a trace without sync events has tens of thousands of records none reads).
    by_stream, by_thread = _Launches(), _Launches()
    if trace.waits:
        streams, threads = by_stream.items, by_thread.items
        for i, (k, c) in enumerate(zip(kernels, calls, strict=True)):
            if c:
                streams[k.stream].append((c.ts, i))
                threads[c.tid].append((c.ts, i))
    elif trace.wait_calls:
        threads = by_thread.items
        for i, c in enumerate(calls):
            if c:
                threads[c.tid].append((c.ts, i))
    by_stream.freeze()
    by_thread.freeze()
    records = _Launches()
    for corr in trace.records if trace.waits else ():
        if (c := trace.launches.get(corr)) is not None:
            records.add(c.tid, c.ts, corr)
            if corr in trace.event_streams:
                records.add(("event", trace.event_streams[corr][1]), c.ts, corr)
    records.freeze()

    def producer_of(record: int, wait_on_stream: int, waiting: int, consumer: int) -> int:
        """The last GPU activity launched before the record call on its stream; -1: none. Where the record's
        stream is unknown, it is the stream of the thread's last launch, and the producer that stream's last
        launch from any thread: a record captures all work enqueued before it, and torch's backward launches from
        its autograd thread onto the stream the main thread then records on. Where the thread's last launch is on
        the `waiting` stream itself (a wait on its own work would be a no-op, which torch's wait_stream never
        issues), the thread's latest launch on another stream that ended by the `consumer`'s start: the join of a
        side stream, recorded after the main stream's launch (without it the kernel after the join is simulated
        beside the collective)."""
        stream = wait_on_stream if wait_on_stream >= 0 else trace.event_streams.get(record, (-1, -1))[0]
        rec = trace.launches[record]
        if stream >= 0:
            return by_stream.last_before(stream, rec.ts)
        last = by_thread.last_before(rec.tid, rec.ts)
        if last >= 0 and kernels[last].stream == waiting:
            other = by_thread.latest_where(rec.tid, rec.ts, lambda j: kernels[j].stream != waiting)
            last = other if other >= 0 and kernels[other].end <= kernels[consumer].ts + PLAUSIBLE_US else last
        return by_stream.last_before(kernels[last].stream, rec.ts) if last >= 0 else last

    events: dict[int, list[int]] = defaultdict(list)
    unresolved: dict[int, list[Unresolved]] = defaultdict(list)
    fallback = 0
    for w in trace.waits:
        call = trace.launches.get(w.correlation)
        at = call.ts if call else w.ts
        consumer = by_stream.first_after(w.stream, at)
        if consumer < 0:
            continue  # gates nothing in the trace
        if w.record_correlation in trace.launches:
            record = w.record_correlation
        elif w.event_id >= 0 and (record := records.last_before(("event", w.event_id), at)) >= 0:
            pass
        else:  # torch 2.11: neither the record's correlation nor its stream: the same thread's latest record
            # whose producer could have been waited for (one that ends after the gated kernel started was not) on
            # another stream (a wait on its own stream's work is a no-op torch never issues: FSDP2's copy-in
            # stream waits for the copy-out recorded before the records of its own later launches)
            candidates = records.latest_before(call.tid, at, RECORDS_LOOKED_AT) if call else []
            record = next((r for r in candidates if 0 <= (j := producer_of(r, -1, w.stream, consumer))
                           and kernels[j].end <= kernels[consumer].ts + PLAUSIBLE_US
                           and kernels[j].stream != w.stream),
                          candidates[0] if candidates else -1)
            fallback += record >= 0
        if record < 0:
            unresolved[consumer].append(Unresolved(_NO_RECORD, at, w.stream))
            continue
        stream = w.wait_on_stream if w.wait_on_stream >= 0 else trace.event_streams.get(record, (-1, -1))[0]
        producer = producer_of(record, w.wait_on_stream, w.stream, consumer)
        if producer < 0:
            if stream < 0:
                unresolved[consumer].append(Unresolved(_NO_PRODUCER, at, w.stream))
            continue  # an event recorded on an idle stream: nothing to wait for
        if kernels[producer].end > kernels[consumer].ts + PLAUSIBLE_US:
            producer_name = repr(shorten(kernels[producer].name, 60)).replace("{", "{{").replace("}", "}}")
            unresolved[consumer].append(Unresolved(f"stream {{stream}} waited at {{at:.3f}}: the matched producer "
                                                   f"{producer_name} ends after the kernel started", at, w.stream))
        elif kernels[producer].stream != w.stream:  # on its own stream, stream order says it already
            events[consumer].append(producer)

    matched = {w.correlation for w in trace.waits}
    blind = 0
    call_of, first_after = trace.launches.get, by_thread.first_after  # once, not once a wait call
    for corr in trace.wait_calls:
        if corr in matched or (call := call_of(corr)) is None:
            continue
        if (consumer := first_after(call.tid, call.ts)) >= 0:
            blind += 1
            unresolved[consumer].append(Unresolved(_NO_WAIT_RECORD, call.ts))
    hidden, resolved = _graph_edges(kernels, trace, events, unresolved)
    notes = []
    if resolved:
        notes.append(f"{resolved} CUDA graph replay(s) on several streams: what their kernels waited for is the "
                     "graph's edges, as the doctor's capture read the graph")
    if hidden:
        replays, n = hidden
        notes.append(f"{n} kernel(s) of {replays} CUDA graph replay(s) that ran on several streams: the trace has no "
                     "record of a graph's edges"
                     + (" and none of the captured graphs matches these replays" if trace.graphs else "")
                     + ", so what each waited for inside the graph is unknown and their waits are not diagnosed (run "
                     "the program under `ccoverlap doctor`, which reads the graphs that torch.cuda.CUDAGraph "
                     "captures, or the step once without the graph)")
    if blind:
        notes.append(f"{blind} stream wait(s) without a Stream Wait Event record "
                     f"({'no CUDA sync events in the trace' if not trace.waits else 'some records missing'}): "
                     f"the kernels launched after them have an unknown dependency; {SYNC_EVENTS_HINT}")
    if other := sum(len(v) for v in unresolved.values()) - blind - (hidden[1] if hidden else 0):
        notes.append(f"{other} event wait(s) could not be matched to the GPU work they waited for: "
                     "the kernels after them have an unknown dependency")
    if fallback:
        notes.append(f"{fallback} event wait(s) matched to the latest event record on the same CPU thread "
                     "(the trace names neither the record nor its stream)")
    return Graph(kernels, release, [c is not None for c in calls], prev,
                 {i: tuple(p) for i, p in events.items()}, {i: tuple(r) for i, r in unresolved.items()}, tuple(notes))


def _graph_edges(kernels: tuple[KernelEvent, ...], trace: Trace, events: dict[int, list[int]],
                 unresolved: dict[int, list[Unresolved]]) -> tuple[tuple[int, int] | None, int]:
    """The waits inside every CUDA graph replay whose activities ran on more than one stream (a replay on one
    stream is a chain: its stream order is its edges). Where a captured topology matches the replay
    (analysis/graphs.py), its edges become the activities' event waits, beside the executor's stream order (two
    nodes without an edge that the executor put on one stream did run in its order: a wait behind the other is the
    stream's, never taken for a wait for SMs); else every activity but the first is unresolved.
    ((replays, activities) left unresolved, or None; replays resolved)."""
    if not trace.graph_calls:  # no replay: nothing to pass over
        return None, 0
    replays: dict[int, list[int]] = defaultdict(list)
    for i, k in enumerate(kernels):
        if k.correlation in trace.graph_calls:
            replays[k.correlation].append(i)
    hidden, resolved = [], 0
    for idx in replays.values():
        if (streams := len({kernels[i].stream for i in idx})) < 2:
            continue
        found = graphs.edges([kernels[i] for i in idx], trace.graphs) if trace.graphs else None
        if found is None:
            hidden.append(idx)
            why = Unresolved(f"inside a CUDA graph replayed on {streams} streams: {GRAPH_EDGES_UNKNOWN}")
            for i in idx[1:]:  # `kernels` is sorted by start: the first ran after the launch and its stream only
                unresolved[i].append(why)
            continue
        resolved += 1
        for i, preds in zip(idx, found, strict=True):
            if preds:
                events[i].extend(idx[p] for p in preds)
    return ((len(hidden), sum(len(idx) - 1 for idx in hidden)) if hidden else None), resolved
