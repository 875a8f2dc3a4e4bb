"""The typed reader of Chrome/Kineto trace JSON into the trace data model (ccoverlap.analysis.model).

A torch.profiler / Kineto Chrome trace is decoded once (msgspec, into typed
structs that hold only the fields read: a cpu_op's shapes are skipped, never
built) into a `Trace`: the GPU activities of one rank with what the analyses
need and nothing else; a large file is read in two processes (_split). Every
analysis is a pure function of the model (ccoverlap.analysis.metrics). Also
here: a folder's trace files (discover) and the files that could not be read
(Problem, grouped).
"""
from __future__ import annotations

import gc
import gzip
import json
import math
import mmap
import os
import pickle
import re
import stat
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from ccoverlap.analysis.model import _CORRELATION, Call, Classifier, KernelEvent, LeftOut, StreamWait, Trace
from ccoverlap.analysis.parallel import Forked
from ccoverlap.util.errors import UsageError
from ccoverlap.util.inputs import open_regular
from ccoverlap.util.text import shorten
from ccoverlap.model.footprint import KernelFootprint

#: On GPU lanes but not GPU work: annotations, cuda_sync (a host or stream waiting), cuda_event (an event recorded).
_SKIPPED_CATS = frozenset({"gpu_user_annotation", "cuda_sync", "cuda_event", "Trace", "trace"})
_ANNOTATION_CATS = frozenset({"user_annotation", "gpu_user_annotation"})  # where ProfilerStep annotations are
_CALL_CATS = frozenset({"cuda_runtime", "cuda_driver"})  # CPU calls: each has a correlation id
#: CPU work and flows (none of the categories above): without a lane, a correlation or a ProfilerStep name, such an
#: event is nothing the model reads (most of a trace's events: the flow arrows alone are 40% of them).
_PLAIN_CATS = frozenset({"ac2g", "cpu_op", "python_function", "fwdbwd", "cpu_instant_event"})
#: CPU calls that record a CUDA event, and that make a stream wait for one (runtime and driver API).
_RECORD_CALLS = ("cudaEventRecord", "cuEventRecord")  # name prefixes: cudaEventRecordWithFlags too
_WAIT_CALLS = frozenset({"cudaStreamWaitEvent", "cuStreamWaitEvent"})
_GRAPH_CALL = "GraphLaunch"  # in the name of a call that replays a CUDA graph (cudaGraphLaunch, cuGraphLaunch)


class _Args(msgspec.Struct, gc=False):
    """The args read: what an event is (GPU work on a stream, or a CPU call with a correlation id), and the rest
    of a kernel's or sync record's (the events the model keeps in full); other keys are skipped, never built.
    The fields in the order Kineto writes a kernel's args: msgspec looks for a key from the field after the last
    one matched, so keys in field order are matched at the first try (the decode about 5% faster, measured)."""

    device: Any = None
    stream: Any = None
    correlation: Any = None
    registers: Any = msgspec.field(name="registers per thread", default=None)
    smem: Any = msgspec.field(name="shared memory", default=UNSET)
    blocks_per_sm: Any = msgspec.field(name="blocks per SM", default=None)
    grid: Any = None
    block: Any = None
    collective: Any = msgspec.field(name="Collective name", default=UNSET)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    dtype: Any = None
    group: Any = msgspec.field(name="Process Group Name", default=None)
    event_id: Any = -1
    wait_on_stream: Any = -1
    wait_on_cuda_event_record_corr_id: Any = -1
    wait_on_cuda_event_id: Any = -1


class _Event(msgspec.Struct, gc=False):
    """One trace event, only the fields read; msgspec skips the other keys (a cpu_op's shapes among them) without
    building them."""

    ph: Any = None  # in the order Kineto writes them, as _Args
    cat: Any = None
    name: Any = UNSET  # missing: not text, as a mistyped one
    tid: Any = None
    ts: Any = UNSET
    dur: Any = UNSET
    args: _Args | None = None


class _File(msgspec.Struct, gc=False):
    """The top level: the events kept as their span of the text (msgspec.Raw, checked as JSON, nothing built),
    decoded a batch at a time (_batches), so the decoded events never pile up in memory."""

    traceEvents: msgspec.Raw | UnsetType = UNSET
    distributedInfo: Any = None
    deviceProperties: Any = None


class _Events(msgspec.Struct, gc=False):
    """traceEvents typed as before: decoded only to say why a traceEvents that is not an array is refused."""

    traceEvents: list[msgspec.Raw] | UnsetType = UNSET


_FILE = msgspec.json.Decoder(_File)
_EVENTS = msgspec.json.Decoder(_Events)
_EVENT = msgspec.json.Decoder(_Event)
_BATCH_OF = msgspec.json.Decoder(list[_Event])
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_NO_ARGS = _Args()
#: Where one event ends and the next begins, unless inside a string or a nested value: a batch cut there that
#: decodes proves it (cut elsewhere, the text before the cut leaves a string or a bracket open).
_CUT = re.compile(rb"\}\s*,\s*\{")
#: Where a trace's events seem to start, found without the top level's decode (_split: the forked process checks).
_EVENTS_AT = re.compile(rb'"traceEvents"\s*:\s*\[')
#: Bytes of events decoded at once: small batches decode fastest (measured: 64 kB 0.26 s, 4 MB 0.6 s for 157 MB).
_BATCH = 1 << 16
#: Text past this (bytes) is read by two processes where a core is free (read_trace's `split`): each decodes
#: and models half of the events, and the halves are merged in order.
SPLIT_BYTES = 32 << 20
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
#: Kineto's categories of GPU activity: an event of one of them that cannot be read is left out, counted.
_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
#: A profiled window lasts seconds to minutes: a GPU event longer than this, or starting further than this from
#: the median start of the rank's GPU events (or launched further from it), has an impossible time (us).
MAX_SPAN_US = 3600e6
#: Ranks and world sizes past this are not a job's (and would make the missing-rank list endless).
MAX_RANKS = 1 << 20
#: deviceProperties fields the occupancy model reads, and their valid range: outside it the entry is left out.
_DEVICE_FIELDS = {"numSms": (1, 4096), "maxThreadsPerMultiprocessor": (32, 1 << 16),
                  "regsPerMultiprocessor": (1024, 1 << 24), "sharedMemPerMultiprocessor": (0, 1 << 30),
                  "sharedMemPerBlockOptin": (0, 1 << 30), "computeMajor": (1, 99), "computeMinor": (0, 99)}
#: The decompressed size limit where none is given: this share of the memory available per worker (the model
#: and the decoder's buffers take about as much again as the text).
MEMORY_SHARE = 0.25
_CHUNK = 1 << 20
_INF = math.inf
_UNSEEN = object()  # a CPU call's name not looked at yet (_Reading.call_lists)
_TS, _DUR = attrgetter("ts"), attrgetter("dur")


def trace_limit(jobs: int = 1, mb: float = 0.0) -> int:
    """The largest decompressed trace read, in bytes: `mb` where given (> 0), else MEMORY_SHARE of the memory
    available (MemAvailable, else physical memory) per worker, at least 64 MiB."""
    if mb > 0:
        return int(mb * 1e6)
    avail = None
    try:
        with open("/proc/meminfo", "rb") as fh:
            avail = next((int(line.split()[1]) * 1024 for line in fh if line.startswith(b"MemAvailable:")), None)
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (OSError, ValueError, AttributeError):
            avail = 16 << 30
    return max(int(avail * MEMORY_SHARE / max(jobs, 1)), 64 << 20)


def printable(path: Path | str) -> str:
    """A path as text that prints anywhere: bytes that are not UTF-8 (a name's surrogate escapes) as \\xNN."""
    text = str(path)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return os.fsencode(text).decode("utf-8", "backslashreplace")


def _load(path: Path, limit: int) -> bytes | bytearray:
    """The whole JSON text: msgspec decodes one buffer, so a .gz is inflated in 1 MiB chunks into one bytearray,
    stopping past `limit` bytes (the memory cost: the uncompressed text, once). Only a regular file is opened
    (stat first: a FIFO or a device is never opened), and one that changed while read is refused."""
    with open_regular(path, "a trace file") as raw:
        before = os.fstat(raw.fileno())
        if not path.name.endswith(".gz"):
            if before.st_size > limit:
                raise UsageError(_too_large(_size(before.st_size), limit))
            text = raw.read(before.st_size)  # what is there now: a file still growing is caught below
        else:
            text = bytearray()
            with gzip.GzipFile(fileobj=raw) as fh:
                while chunk := fh.read(_CHUNK):
                    text += chunk
                    if len(text) > limit:
                        raise UsageError(_too_large(f"{_size(before.st_size)} compressed, more than "
                                                    f"{_size(len(text))} decompressed", limit))
        after = os.fstat(raw.fileno())
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        raise UsageError(f"changed while it was read ({before.st_size} -> {after.st_size} bytes): read it once "
                         "it is complete")
    return text


def _size(n: int) -> str:
    return next(f"{n / scale:.1f} {unit}" for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1, "B"))
                if n >= scale or scale == 1)


def _too_large(size: str, limit: int) -> str:
    return (f"{size}: past the limit of {limit / 1e6:.0f} MB decompressed (a quarter of the memory available per "
            "worker; --max-trace-mb MB sets it)")


def read_document(path: Path) -> dict:
    """The whole decoded JSON of a trace file (every event, every key), for what writes it out again
    (analysis.perfetto); a UsageError says why it is unusable."""
    try:
        doc = msgspec.json.decode(_load(path, trace_limit()))
    except (msgspec.DecodeError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise UsageError(f"{path}: invalid or truncated JSON ({_short(exc)})") from None
    except RecursionError:  # msgspec's bound on nesting, as in read_trace
        raise UsageError(f"{path}: nested too deeply: not a Chrome trace") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or _short(exc)})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: not a Chrome trace: no traceEvents")
    return doc


def read_trace(path: Path, classifier: Classifier = Classifier(), limit: int | None = None,
               split: bool = False) -> Trace:
    """Decode one trace file into a Trace (typed: only the fields read are built); a UsageError says why a file
    is unusable. `limit`: the largest decompressed text read, in bytes (default: trace_limit()); `split`: a core
    is free for this file, a large one is read in two processes (_split)."""
    try:
        text = _load(path, trace_limit() if limit is None else limit)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise UsageError(f"truncated or corrupt gzip ({_short(exc)})") from None
    except OSError as exc:
        raise UsageError(f"cannot read ({exc.strerror or _short(exc)})") from None
    if split and len(text) > SPLIT_BYTES:
        with no_cyclic_gc(), _refused_events():
            if (read := _split(text, classifier)) is not None:
                return _built(path, *read, events=True)
    try:
        doc = _FILE.decode(text)
        if doc.traceEvents is not UNSET and memoryview(doc.traceEvents)[:1] != b"[":
            _EVENTS.decode(text)  # raises what a traceEvents that is not an array is refused for
    except msgspec.ValidationError as exc:
        if " - at `$" not in str(exc):  # JSON, but not an object
            raise UsageError("not a Chrome trace: no traceEvents") from None
        raise UsageError(f"malformed trace event ({_short(exc)})") from None
    except RecursionError:  # msgspec's bound on nesting (a Chrome trace nests a few levels)
        raise UsageError("nested too deeply: not a Chrome trace") from None
    except msgspec.DecodeError as exc:
        raise UsageError(f"invalid or truncated JSON ({_short(exc)})") from None
    with no_cyclic_gc(), _refused_events():
        reading = _Reading(classifier)
        if (events := doc.traceEvents) is not UNSET:
            for batch in _batches(memoryview(events), 1, len(events) - 1):  # up to the closing bracket
                reading.feed(batch)
        return _built(path, doc, reading, events=events is not UNSET)


@contextmanager
def _refused_events():
    """An event the model cannot take (of the wrong type, or refused by name: a UsageError) as the one-line
    UsageError that refuses the file."""
    try:
        yield
    except UsageError:  # a refused event, named
        raise
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        raise UsageError(f"malformed trace event ({_short(exc)})") from None


class _Tally:
    """Left-out events by reason: count, first example, readable GPU times (summed in trace order at the end, so
    that a trace read in two halves gives the same sum)."""

    def __init__(self):
        self.gpu: dict[str, list] = {}
        self.other: dict[str, list] = {}
        self.steps = self.calls = 0

    def __call__(self, ev: _Event, why: str, gpu: bool = True) -> None:
        entry = (self.gpu if gpu else self.other).setdefault(why, [0, ev, []])
        entry[0] += 1
        dur = ev.dur
        if gpu and (type(dur) is float or type(dur) is int) and 0 < dur <= MAX_SPAN_US:
            entry[2].append(dur)

    def merge(self, later: _Tally) -> None:
        """A later range's tally appended: counts added, first examples kept, reasons in order of first use."""
        for mine, theirs in ((self.gpu, later.gpu), (self.other, later.other)):
            for why, (n, ev, durs) in theirs.items():
                entry = mine.setdefault(why, [0, ev, []])
                entry[0] += n
                entry[2] += durs
        self.steps += later.steps
        self.calls += later.calls

    def left_out(self, kernels: list[KernelEvent]) -> LeftOut:
        lines = []
        for table, what in ((self.other, "CPU event(s)"), (self.gpu, "GPU event(s)")):
            for why, (n, ev, _) in table.items():
                lines.append(f"left out: {n} {what} {why} (first: {_name(ev, 60)} at ts {shorten(repr(ev.ts), 30)})")
        return LeftOut(tuple(lines), sum(e[0] for e in self.gpu.values()),
                       sum(sum(e[2], 0.0) for e in self.gpu.values()),
                       len(kernels), math.fsum(map(_DUR, kernels)), self.steps, self.calls)


def _time(value) -> float | None:
    """A time as the trace writes it (a number, not a boolean), finite; else None."""
    if (type(value) is float or type(value) is int) and math.isfinite(value):
        return float(value)
    return None


def _dur_problem(dur) -> str | None:
    if (type(dur) is not float and type(dur) is not int) or not math.isfinite(dur):
        return f"with a dur that is not a finite number ({shorten(repr(dur), 30)})"
    if dur < 0:
        return "with a negative dur"
    if dur == 0:
        return "with a zero dur"
    if dur > MAX_SPAN_US:
        return f"longer than {MAX_SPAN_US / 3.6e9:g} h"
    return None


class _Reading:
    """The model's pieces from the events read so far, in trace order: `feed` takes batches of events, `merge`
    appends what a later range of them gave (in another process: `_events`), as if this one had read them."""

    def __init__(self, classifier: Classifier):
        self.classifier = classifier
        self.seen: dict[tuple, tuple] = {}  # shared names, footprints and collectives (see _kernel)
        self.kernels: list[KernelEvent] = []
        self.steps: list[tuple[str, float, _Event]] = []
        self.launches: dict[int, Call] = {}
        self.waits: list[StreamWait] = []
        self.records: list[int] = []
        self.wait_calls: list[int] = []
        self.event_streams: dict[int, tuple[int, int]] = {}
        self.graph_calls: list[int] = []
        # a CPU call's name -> the list its correlation joins (wait_calls, records, graph_calls) or None: decided
        # once a name (a trace has a few dozen), not by three tests of each of its 200,000 calls
        self.call_lists: dict[str, list[int] | None] = {}
        self.threads: dict[int, int] = {}
        self.bad_calls: set[int] = set()  # correlations of launch calls that could not be read
        self.tally = _Tally()
        self.device_id = None

    def sent(self) -> tuple:
        """What another process sends back of its range (not the classifier: it holds a compiled regex): kernels,
        calls and waits a list per field (_columns), and of each step's event only what a tally names (the event
        struct pickles slowly)."""
        launches = self.launches
        return (_columns(self.kernels, KernelEvent), [(n, t, e.name, e.ts, e.dur) for n, t, e in self.steps],
                list(launches), _columns(launches.values(), Call), _columns(self.waits, StreamWait),
                self.records, self.wait_calls, self.event_streams, self.graph_calls, self.bad_calls, self.tally,
                self.device_id)

    def merge(self, later: tuple) -> None:
        """What a later range of the events gave (`sent`): appended, as one pass over both would have it."""
        (kernels, steps, corrs, calls, waits, records, wait_calls, event_streams, graph_calls, bad_calls, tally,
         device_id) = later
        self.kernels += map(KernelEvent, *kernels)
        self.waits += map(StreamWait, *waits)
        self.steps += ((n, t, _Event(name=name, ts=ts, dur=dur)) for n, t, name, ts, dur in steps)  # as tallied
        self.launches.update(zip(corrs, map(Call, *calls)))
        self.records += records
        self.wait_calls += wait_calls
        self.graph_calls += graph_calls
        self.event_streams.update(event_streams)
        self.bad_calls |= bad_calls
        self.tally.merge(tally)
        self.device_id = self.device_id if device_id is None else device_id

    def feed(self, events: list[_Event]) -> None:
        """What each event is, in one pass; what cannot be read is left out, counted."""
        classifier, seen, kernels, steps, launches = (self.classifier, self.seen, self.kernels, self.steps,
                                                      self.launches)
        waits, records, wait_calls, event_streams, graph_calls = (self.waits, self.records, self.wait_calls,
                                                                  self.event_streams, self.graph_calls)
        threads, bad_calls, tally, device_id = self.threads, self.bad_calls, self.tally, self.device_id
        call_lists = self.call_lists
        for ev in events:
            if type(cat := ev.cat) is not str:  # a mistyped one would not hash
                cat = None
            args = ev.args or _NO_ARGS
            if cat in _PLAIN_CATS and args.stream is None and args.correlation is None and type(
                    name := ev.name) is str and "ProfilerStep" not in name:
                continue  # what the tests below would find nothing to do with, told in five
            if ev.ph != "X" or ev.dur is UNSET:
                if cat in _GPU_CATS or cat in _CALL_CATS or cat not in _SKIPPED_CATS and type(args.correlation) is int:
                    _unreadable(ev, args, cat, "that are not complete events (ph 'X' with a dur)", tally, bad_calls)
                elif type(name := ev.name) is str and "ProfilerStep" in name:
                    tally(ev, "(ProfilerStep annotations) that are not complete events (ph 'X' with a dur)", gpu=False)
                    tally.steps += 1
                continue
            stream = args.stream
            if type(ev.name) is not str and (cat in _ANNOTATION_CATS or cat not in _SKIPPED_CATS and (
                    args.correlation is not None or stream is not None)):  # a step, a call or GPU work: which?
                _unreadable(ev, args, cat, f"whose name is not text ({shorten(repr(ev.name), 30)})", tally,
                            bad_calls)
                continue
            if cat is None and stream is not None:
                tally(ev, f"on a GPU lane whose cat is not text ({shorten(repr(ev.cat), 30)})")
                continue
            if cat in _SKIPPED_CATS:
                # HTA takes every ProfilerStep that is not GPU work (a lane and a correlation) as a
                # step start: the GPU-side annotation too, which Kineto writes without a stream.
                if "ProfilerStep" in (name := str(ev.name)) and not (
                        type(stream) is int and stream >= 0 and args.correlation is not None):
                    _step(ev, name, steps, tally)
                elif cat == "cuda_sync" and name == "Stream Wait Event" and type(stream) is int:
                    waits.append(_wait(ev, args, stream))
                elif cat == "cuda_event" and type(stream) is int and type(args.correlation) is int:
                    event_streams[args.correlation] = (stream, _int(args.event_id))
                continue
            if type(stream) is int and stream >= 0:  # Kineto's GPU lanes; not bool, which is an int too
                if (kernel := _kernel(ev, args, stream, classifier, seen, tally)) is not None:
                    kernels.append(kernel)
                    device_id = args.device if type(args.device) is int else device_id
            elif cat in _GPU_CATS:
                tally(ev, "without a stream (args null or missing)" if ev.args is None or stream is None else
                      f"whose stream is not a non-negative integer ({shorten(repr(stream), 30)})")
            elif (corr := args.correlation) is not None:
                ts, dur, tid = ev.ts, ev.dur, ev.tid
                if not (type(ts) is float and -_INF < ts < _INF):  # _time's check inline where it passes
                    ts = _time(ts)
                if type(corr) is not int or ts is None:
                    tally(ev, "(calls with a correlation) whose ts or correlation is not a number", gpu=False)
                    if type(corr) is int:
                        bad_calls.add(corr)
                    else:
                        tally.calls += 1
                    continue
                finite = (type(dur) is float or type(dur) is int) and 0 <= dur < _INF
                tid = threads.setdefault(tid, tid) if type(tid) is int else str(tid)  # one int per thread
                launches[corr] = Call(ts, ts + dur if finite else ts, tid)
                if (joins := call_lists.get(name := ev.name, _UNSEEN)) is _UNSEEN:
                    joins = call_lists[name] = (wait_calls if name in _WAIT_CALLS else records if
                                                name.startswith(_RECORD_CALLS) else graph_calls if _GRAPH_CALL in name
                                                else None)
                if joins is not None:
                    joins.append(corr)
            elif cat in _CALL_CATS:
                tally(ev, "(runtime and driver calls) without a correlation", gpu=False)
                tally.calls += 1
            elif "ProfilerStep" in (name := str(ev.name)):
                _step(ev, name, steps, tally)
        self.device_id = device_id


def _columns(structs: Iterable, cls: type[msgspec.Struct]) -> list[list]:
    """`structs` (of type `cls`) as a list per field, cls's arguments: lists of numbers and of shared objects
    pickle in C without a memo entry per object, as tuples (and structs) have; half the time of tuples there and
    back, measured."""
    return [list(map(attrgetter(name), structs)) for name in cls.__struct_fields__]


def _batches(array: memoryview, start: int, stop: int) -> Iterator[list[_Event]]:
    """The events of array[start:stop] (whole events and the commas and blanks between them), decoded a batch
    (_spans) at a time. A batch that does not decode (cut inside a string or a nested value, or an event of the
    wrong type) and the rest of the range after it are decoded one event at a time, as each is read: an error is
    raised at its event, after the events before it (a DecodeError: `stop` is not where an event ends)."""
    for at, end in _spans(array, start, stop):
        try:
            events = _batch(array, at, end)
        except msgspec.DecodeError:  # a ValidationError too
            for raw in _RAWS.decode(b"[" + array[at:stop] + b"]"):
                yield [_EVENT.decode(raw)]
            return
        yield events


def _split(text: bytes | bytearray, classifier: Classifier) -> tuple[_File, _Reading] | None:
    """A large file read in two processes that share its batches of events as they go: this one takes them one at a
    time from the front, the forked one (_later) blocks from the back, until they meet (_Claims), so that
    both end together whichever goes slower; the forked one's blocks come back pickled and are merged in order. The
    top level is checked first (_top_level: where the events' array closes), the batches found before the fork
    (_spans). The top level's other fields and the reading; None where anything is off (no '"traceEvents": [', or
    its array not the top level's events; a batch that does not decode whole: a cut inside an event, an event
    refused, text that is not JSON; the forked process silent): read_trace then reads the file in one pass, as it
    would have, and raises what one pass raises."""
    view = memoryview(text)
    if (found := _EVENTS_AT.search(view)) is None or (top := _top_level(text, found.end() - 1)) is None:
        return None
    spans = _spans(view, found.end(), top[1])
    claims = _Claims(len(spans))
    later = Forked(partial(_later, classifier, view, spans, claims))
    try:
        reading = _Reading(classifier)
        try:
            while (i := claims.front()) is not None:
                reading.feed(_batch(view, *spans[i]))
        except Exception:  # raised again, where one pass raises it, by the one pass that reads the file
            return None
        if (blocks := later.result()) is None or (blocks[-1][0] if blocks else len(spans)) != claims.met:
            return None  # the forked one silent, or stopped at a batch it could not read
        for _, block in reversed(blocks):  # taken from the back: in the events' order
            reading.merge(pickle.loads(block))
        return top[0], reading
    finally:
        later.cancel()


#: The fewest batches the forked reader takes at once, from the back (_split): few, so that the two end together.
_BLOCK = 8
#: Seconds a process waits for the batches' lock (held for microseconds): longer, the other died holding it.
_LOCK_S = 10.0


def _batch(view: memoryview, at: int, end: int) -> list[_Event]:
    """The events of one batch (_spans), decoded at once."""
    return _BATCH_OF.decode(b"[" + view[at:end] + b"]")


def _spans(view: memoryview, start: int, stop: int) -> list[tuple[int, int]]:
    """The batches of the events of view[start:stop] (whole events and the commas and blanks between them): about
    _BATCH bytes each, cut where one event seems to end and the next to begin (_CUT; a batch's decode proves it)."""
    search, at, out = _CUT.search, start, []
    while at < stop:
        cut = search(view, at + _BATCH, stop) if at + _BATCH < stop else None
        out.append((at, cut.start() + 1 if cut else stop))
        at = cut.end() - 1 if cut else stop
    return out


class _Claims:
    """Which of `n` batches are left to read, in memory shared with the forked reader (_split): this process takes
    them one at a time from the front, the forked one blocks from the back, each under a lock, until they meet."""

    def __init__(self, n: int):
        from multiprocessing import Lock  # on use: a large file on two cores only

        self.shared = mmap.mmap(-1, 16)  # shared with the processes forked from here: the front and the back
        self.ends = memoryview(self.shared).cast("q")
        self.ends[0], self.ends[1] = 0, n
        self.lock = Lock()

    def front(self) -> int | None:
        """The next batch from the front, or None once they meet."""
        with self._held():
            if (at := self.ends[0]) >= self.ends[1]:
                return None
            self.ends[0] = at + 1
            return at

    def back(self, least: int) -> tuple[int, int] | None:
        """The next block from the back (its first batch and the one after its last), or None once they meet: a
        quarter of those left, at least `least` (blocks shrink as they near each other: few, and a small last)."""
        with self._held():
            if (end := self.ends[1]) <= (front := self.ends[0]):
                return None
            self.ends[1] = lo = max(front, end - max(least, (end - front) // 4))
            return lo, end

    @property
    def met(self) -> int:
        """Where they met (once the front found none left): the first batch the back took, or `n`."""
        return self.ends[0]

    @contextmanager
    def _held(self):
        if not self.lock.acquire(timeout=_LOCK_S):  # the other process died holding it
            raise TimeoutError("the batches' lock was not released")
        try:
            yield
        finally:
            self.lock.release()


def _later(classifier: Classifier, text: memoryview, spans: list[tuple[int, int]],
           claims: _Claims) -> list[tuple[int, bytes]]:
    """_split's forked reader: blocks of batches taken from the back until the two processes meet, each read into
    a reading of its own and pickled as it is read; the first batch of each and its pickle, the last block first.
    It stops at the first batch that does not decode or is refused (one pass then says why)."""
    blocks = []
    try:
        while (block := claims.back(_BLOCK)) is not None:
            reading = _Reading(classifier)
            for at, end in spans[block[0]:block[1]]:
                reading.feed(_batch(text, at, end))
            blocks.append((block[0], pickle.dumps(reading.sent(), pickle.HIGHEST_PROTOCOL)))
    except Exception:
        pass
    return blocks


#: `]`s from the end of the text tried as the events' closing bracket (_top_level): Kineto writes one key after
#: the events (traceName), and a file where none of these is the bracket is read in one pass.
_TAIL_TRIES = 8


def _top_level(text: bytes | bytearray, start: int) -> tuple[_File, int] | None:
    """The top level as read_trace decodes it, its events aside, and where their closing bracket is, without
    decoding the events' text (msgspec checks it: 80 ms at 157 MB, which the two shares' decodes check again):
    the text with the events' array (from `start` to one of the last `]`s) replaced by a placeholder, an array
    holding a random string, is decoded, and the placeholder must come back as its traceEvents. Then the file is
    this top level with that array in its place, and is JSON where both shares of the events decode whole
    (_split: they cover the array's text up to its bracket; a `]` after the events' real end leaves the later
    share's text not events). None where no `]` tried gives that."""
    placeholder = b'["%s"]' % os.urandom(16).hex().encode()
    head, view, stop = memoryview(text)[:start], memoryview(text), len(text)
    for _ in range(_TAIL_TRIES):
        if (stop := text.rfind(b"]", start + 1, stop)) < 0:
            return None
        try:
            doc = _FILE.decode(b"".join((head, placeholder, view[stop + 1:])))
        except Exception:  # not JSON, RecursionError too
            continue
        if doc.traceEvents is not UNSET and bytes(doc.traceEvents) == placeholder:
            return _File(UNSET, doc.distributedInfo, doc.deviceProperties), stop
    return None


def _built(path: Path, doc: _File, reading: _Reading, events: bool) -> Trace:
    """The Trace of a file's top level (`doc`: its events aside) and its events read (`events`: it has some)."""
    kernels, launches, steps, tally = reading.kernels, reading.launches, reading.steps, reading.tally
    if not kernels and not tally.gpu:
        raise UsageError("no GPU kernels (record with torch.profiler activities including CUDA)"
                         if events else "not a Chrome trace: no traceEvents")
    kernels.sort(key=_TS)
    kernels, calls = _in_span(kernels, launches, reading.bad_calls, steps, tally)
    left = tally.left_out(kernels)
    if not kernels:
        raise UsageError(f"no readable GPU kernel ({'; '.join(left.lines)})")
    meta = {"distributedInfo": doc.distributedInfo, "deviceProperties": doc.deviceProperties}
    rank, world, notes = _rank(meta, path)
    device, device_note = _device(meta, reading.device_id)
    notes = notes + left.lines + ((device_note,) if device_note else ())
    trace = Trace(path, rank, world, device, tuple(kernels), tuple((n, t) for n, t, _ in steps), launches, notes,
                  tuple(reading.waits), tuple(reading.records), tuple(reading.wait_calls), reading.event_streams,
                  frozenset(reading.graph_calls), left_out=left)
    vars(trace)["calls"] = calls  # Trace.calls' cache (a cached_property's place), filled from _in_span's lookup
    return trace


def _unreadable(ev: _Event, lane: _Args, cat: str | None, why: str, tally: _Tally, bad_calls: set[int]) -> None:
    """Count an event that cannot be read as what it would have been: GPU work, a CPU call (whose kernels are then
    left out too), or an annotation that may have been a profiler step."""
    if cat in _GPU_CATS or (cat not in _SKIPPED_CATS and lane.stream is not None):
        tally(ev, why)
    elif cat in _CALL_CATS or cat not in _SKIPPED_CATS and lane.correlation is not None:
        tally(ev, f"(calls with a correlation) {why}", gpu=False)
        if type(lane.correlation) is int:
            bad_calls.add(lane.correlation)
        else:
            tally.calls += 1
    else:
        tally(ev, f"(annotations, perhaps a ProfilerStep) {why}", gpu=False)
        tally.steps += 1


def _step(ev: _Event, name: str, steps: list, tally: _Tally) -> None:
    if (ts := _time(ev.ts)) is None:
        tally(ev, "(ProfilerStep annotations) whose ts is not a finite number", gpu=False)
        tally.steps += 1
    else:
        steps.append((name, ts, ev))


def _in_span(kernels: list[KernelEvent], launches: dict[int, Call], bad_calls: set[int], steps: list,
             tally: _Tally) -> tuple[list[KernelEvent], tuple[Call | None, ...]]:
    """The kernels (sorted by start) that start within MAX_SPAN_US of their median start and were launched
    within it, by a call that could be read, and their calls (Trace.calls: looked up here once); the rest, and
    the profiler steps outside it, left out."""
    if not kernels:
        return kernels, ()
    mid = kernels[len(kernels) // 2].ts
    lo, hi = mid - MAX_SPAN_US, mid + MAX_SPAN_US
    calls = tuple(map(launches.get, map(_CORRELATION, kernels)))
    starts = list(map(_TS, filter(None, calls)))
    if lo <= kernels[0].ts and kernels[-1].ts <= hi and bad_calls.isdisjoint(map(_CORRELATION, kernels)) and (
            not starts or lo <= min(starts) and max(starts) <= hi):
        out = kernels  # every kernel and its call within, none by a bad call (the usual trace): checked in C
    else:
        out, kept = [], []
        for k, call in zip(kernels, calls):
            if not lo <= k.ts <= hi:
                tally(_Event(name=k.name, ts=k.ts, dur=k.dur), f"that start more than {MAX_SPAN_US / 3.6e9:g} h "
                      "from the rank's other GPU events")
            elif k.correlation in bad_calls:
                tally(_Event(name=k.name, ts=k.ts, dur=k.dur), "whose launch call could not be read")
            elif call is not None and not lo <= call.ts <= hi:
                tally(_Event(name=k.name, ts=k.ts, dur=k.dur), f"launched more than {MAX_SPAN_US / 3.6e9:g} h from "
                      "the rank's GPU events")
            else:
                out.append(k)
                kept.append(call)
        calls = tuple(kept)
    for step in [s for s in steps if not lo <= s[1] <= hi]:
        tally(step[2], f"(ProfilerStep annotations) more than {MAX_SPAN_US / 3.6e9:g} h from the rank's GPU "
              "events", gpu=False)
        tally.steps += 1
        steps.remove(step)
    return out, calls


def _int(value) -> int:
    return value if type(value) is int else -1


def _wait(ev: _Event, args: _Args, stream: int) -> StreamWait:
    return StreamWait(stream, _ts(ev), _int(args.correlation), _int(args.wait_on_cuda_event_id),
                      _int(args.wait_on_stream), _int(args.wait_on_cuda_event_record_corr_id))


@contextmanager
def no_cyclic_gc():
    """The parse, and the analysis after it, allocate millions of small objects and no reference cycles: the
    cyclic collector would only rescan them, again and again as they pile up (10-25% of the parse time, and
    more than half of unpickling the workers' parts, measured). Nests; usable as a decorator."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _kernel(ev: _Event, args: _Args, stream: int, classifier: Classifier, seen: dict,
            tally: _Tally) -> KernelEvent | None:
    """A KernelEvent, or None where it cannot be read (left out, counted); name, class and footprint are computed
    once per distinct launch shape and shared, and so is each distinct collective (`seen` holds both: a launch
    shape's key has six items, a collective five), which every rank's diagnosis keeps for each of its
    communication kernels (a parent process holds them for every rank)."""
    ts, dur, corr = ev.ts, ev.dur, args.correlation
    # _time's and _dur_problem's checks inline where they pass: two calls fewer per kernel
    if not (type(ts) is float and -_INF < ts < _INF) and (ts := _time(ts)) is None:
        tally(ev, f"whose ts is not a finite number ({shorten(repr(ev.ts), 30)})")
        return None
    if not ((type(dur) is float or type(dur) is int) and 0 < dur <= MAX_SPAN_US) and (why := _dur_problem(dur)):
        tally(ev, why)
        return None
    if type(corr) is not int:  # Kineto gives every GPU activity its launch's: without it, the launch is unknown
        tally(ev, f"whose correlation is not an integer ({shorten(repr(corr), 30)})")
        return None
    if type(ev.name) is not str:
        tally(ev, f"whose name is not text ({shorten(repr(ev.name), 30)})")
        return None
    block, grid, smem = args.block, args.grid, args.smem
    try:
        key = (ev.name, ev.cat, tuple(block) if isinstance(block, list) else block,
               tuple(grid) if isinstance(grid, list) else grid, args.registers, None if smem is UNSET else smem)
        shared = seen.get(key)
    except TypeError:  # an unhashable value (an object) in the launch shape
        key, shared = None, (None, None, None, "whose launch shape (block, grid, registers, shared memory) "
                             "cannot be read")
    if shared is None:
        name = ev.name
        footprint, bad = None, None
        if ev.cat == "kernel" and (block is None or grid is None or smem is UNSET):  # Kineto writes all three
            bad = "(kernels) without a launch shape (block, grid and shared memory)"
        elif block is not None:
            launch = {"block": block, "grid": grid, "registers per thread": args.registers}
            try:
                footprint = KernelFootprint.from_trace_event({"name": name, "args": launch | (
                    {} if smem is UNSET else {"shared memory": smem})})
            except UsageError:
                bad = "whose launch shape (block, grid, registers, shared memory) cannot be read"
        shared = seen[key] = (name, classifier.classify(name, "" if ev.cat is None else str(ev.cat).lower()),
                              footprint, bad)
    name, kind, footprint, bad = shared
    if bad:
        tally(ev, bad)
        return None
    bps = args.blocks_per_sm
    collective = None if args.collective is UNSET else tuple(map(_scalar, (
        args.collective, args.in_nelems, args.out_nelems, args.dtype, args.group)))
    if collective is not None:
        collective = seen.setdefault(collective, collective)
    return KernelEvent(name, kind, stream, ts, float(dur), corr, footprint,
                       float(bps) if type(bps) is float or type(bps) is int else None, collective)


def _scalar(value):
    """A JSON value as a key: lists and objects (not what torch writes there) as their text."""
    return value if value is None or isinstance(value, (str, int, float)) else json.dumps(value)


def _ts(ev: _Event) -> float:
    """An event's start; a time that is not a finite number refuses the trace (every analysis would be wrong)."""
    if (ts := _time(ev.ts)) is None:
        raise UsageError(f"event {_name(ev)}: ts {shorten(repr(ev.ts), 30)} (valid: a finite number)")
    return ts


def _name(ev: _Event, width: int = 100) -> str:
    name = str(ev.name)
    return repr(name if len(name) <= width else name[: width - 3] + "...")


def _rank(meta: dict, path: Path) -> tuple[int, int | None, tuple[str, ...]]:
    """The rank and world size (distributedInfo; else the rank from the file name); a rank outside the world (or
    negative) refuses the file, a world size that is not one is ignored, said."""
    info = meta.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    world, rank, notes = info.get("world_size"), info.get("rank"), ()
    if world is not None and not (type(world) is int and 1 <= world <= MAX_RANKS):
        notes = (f"distributedInfo world_size {shorten(repr(world), 30)} ignored (valid 1-{MAX_RANKS})",)
        world = None
    if type(rank) is not int:
        if match := _RANK_IN_NAME.search(path.name):
            rank = int(match.group(1))
            notes += ("no distributedInfo rank: rank taken from the file name",)
        else:
            rank = 0
            notes += ("no distributedInfo rank and none in the file name: taken as rank 0",)
    top = (world or MAX_RANKS) - 1
    if not 0 <= rank <= top:
        raise UsageError(f"rank {rank} out of range (valid 0-{top}" + (f": world size {world})" if world else ")"))
    return rank, world, notes


def _device(meta: dict, device_id) -> tuple[dict | None, str | None]:
    """The deviceProperties entry of the GPU the kernels ran on (Kineto lists every visible GPU), and a line where
    there is none, or it is left out for a value the occupancy model cannot use."""
    props = meta.get("deviceProperties")
    props = [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []
    entry = next((p for p in props if p.get("id") == device_id), props[0] if props else None)
    if entry is None:
        return None, "no deviceProperties: the GPU is unknown (what its SMs hold is unknown)"
    for key, (lo, hi) in _DEVICE_FIELDS.items():
        if key in entry and not (type(value := entry[key]) is int and lo <= value <= hi):
            return None, (f"left out: deviceProperties {key} {shorten(repr(value), 30)} (valid {lo}-{hi}): the GPU "
                          "is unknown (what its SMs hold is unknown)")
    return entry, None


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return shorten(text, 160)


TRACE_SUFFIXES = (".json", ".json.gz")


def trace_files(folder: Path, problems: list[Problem] | None = None) -> list[Path]:
    """The entries of `folder` named as traces: a FIFO, a device or a folder so named too (the reader refuses
    those, named, without opening them). A folder that cannot be listed is a problem where `problems` is given,
    else a UsageError."""
    try:
        with os.scandir(folder) as entries:
            return sorted(Path(e.path) for e in entries if e.name.endswith(TRACE_SUFFIXES))
    except OSError as exc:
        if problems is None:
            raise UsageError(f"{printable(folder)}: cannot list it ({exc.strerror or _short(exc)})") from None
        problems.append(Problem(folder, f"left out: cannot list it ({exc.strerror or _short(exc)})"))
        return []


def _folders(root: Path, problems: list[Problem]) -> list[Path]:
    """ROOT's subfolders, by name; an entry that cannot be examined is a problem."""
    out = []
    with os.scandir(root) as entries:
        for e in entries:
            try:
                if e.is_dir() and not e.name.endswith(TRACE_SUFFIXES):
                    out.append(Path(e.path))
            except OSError as exc:
                problems.append(Problem(Path(e.path), f"left out: cannot examine it ({exc.strerror or _short(exc)})"))
    return sorted(out)


def discover(root: Path, problems: list[Problem] | None = None) -> dict[str, list[Path]]:
    """Strategy name (its folder's name, printable) -> trace files: ROOT's own files, and one strategy per
    subfolder with traces; subfolders that cannot be read are added to `problems` (where given). ROOT a trace
    file: it alone, the strategy named by its folder.

    `ccoverlap bench --trace` writes one folder per strategy, each with
    rank{r}_trace.json.gz, so its output folder is analysed as it is.
    """
    problems = [] if problems is None else problems
    try:
        mode = os.stat(root).st_mode
        if stat.S_ISREG(mode) and root.name.endswith(TRACE_SUFFIXES):  # one trace file: a strategy of one rank
            return {printable(root.parent.name or root.name): [root]}
        if not stat.S_ISDIR(mode):
            raise UsageError(f"{printable(root)} is not a directory or a trace file (*.json, *.json.gz)")
        found = {printable(root.name): trace_files(root)} | {printable(d.name): trace_files(d, problems)
                                                         for d in _folders(root, problems)}
    except OSError as exc:
        raise UsageError(f"{printable(root)}: cannot read it ({exc.strerror or _short(exc)})") from None
    found = {name: files for name, files in found.items() if files}
    if not found:
        raise UsageError(f"{printable(root)}: no trace files (*.json, *.json.gz) in it or in its subfolders")
    return found


@dataclass(frozen=True)
class Problem:
    """A file that could not be analysed, or something the reader should know about one."""

    path: Path
    message: str

    def __str__(self) -> str:
        return f"{printable(self.path)}: {self.message}"


def grouped(problems: Sequence[Problem]) -> list[str]:
    """One line per kind of problem (its message with the numbers masked), with a count and the files: six ranks
    with the same note make one line, not six (the first file's message stands for the others)."""
    kinds: dict[str, list[Problem]] = {}
    for p in problems:
        kinds.setdefault(re.sub(r"\d+(?:\.\d+)?", "#", p.message), []).append(p)
    out = []
    for same in kinds.values():
        paths = list(dict.fromkeys(p.path for p in same))
        where = printable(paths[0]) if len(paths) == 1 else (
            f"{len(paths)} files in {printable(paths[0].parent)}: {', '.join(printable(p.name) for p in paths)}"
            if len({p.parent for p in paths}) == 1 else f"{len(paths)} files: {', '.join(map(printable, paths))}")
        out.append(f"{where}: {same[0].message}" + (" (numbers from the first)" if len({p.message for p in same}) > 1
                                                    else ""))
    return out


def read_traces(files: list[Path], classifier: Classifier,
                limit: int | None = None) -> tuple[dict[int, Trace], list[Problem]]:
    """One strategy's traces by rank; unusable files, files with too much left out and duplicate ranks become
    problems."""
    traces: dict[int, Trace] = {}
    problems: list[Problem] = []
    for path in files:
        try:
            trace = read_trace(path, classifier, limit)
        except UsageError as exc:
            problems.append(Problem(path, f"skipped: {exc}"))
            continue
        problems += [Problem(path, note) for note in trace.notes]
        if why := trace.left_out.withheld():
            problems.append(Problem(path, f"skipped, no verdict: {why}"))
            continue
        if trace.rank in traces:
            problems.append(Problem(path, f"skipped: rank {trace.rank} again "
                                          f"(already read from {traces[trace.rank].path.name})"))
            continue
        traces[trace.rank] = trace
    return dict(sorted(traces.items())), problems
