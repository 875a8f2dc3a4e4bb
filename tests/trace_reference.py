"""The trace reader as it was before issue 22 (ijson, streamed), kept for the tests only: the typed reader of
ccoverlap.analysis.reader must build the same Trace from every recorded trace (tests/test_analysis_reader.py).
"""
from __future__ import annotations

import ctypes
import gzip
import json
import math
import re
import zlib
from pathlib import Path

import ijson

from ccoverlap.analysis.model import _COLLECTIVE_ARGS, Call, Classifier, KernelClass, StreamWait, Trace, KernelEvent
from ccoverlap.analysis.reader import (_GRAPH_CALL, _RECORD_CALLS, _SKIPPED_CATS, _WAIT_CALLS, _device, _rank, _scalar,
                                      no_cyclic_gc)
from ccoverlap.model import _native
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.util.errors import UsageError
from ccoverlap.util.text import shorten

_HEAD_LIMIT = 16 << 20  # metadata before traceEvents larger than this is not looked at
_TAIL_KEEP = 64 << 10
MAX_DEPTH = 64


class _Tap:
    """A file wrapper that keeps the bytes before "traceEvents" and the last 64 KiB, and refuses a file nested
    deeper than MAX_DEPTH.

    The top-level metadata (distributedInfo, deviceProperties) sits before or
    after the event array; keeping those bytes lets the one streaming pass over
    the events also yield the metadata, without a second read of the file.
    """

    def __init__(self, raw):
        self.raw = raw
        self.head = bytearray()
        self.head_done = False
        self.tail = b""
        self.scan = _native.CJsonScan()
        self.feed = _native.lib().ccov_json_scan_feed

    def read(self, n: int = -1) -> bytes:
        chunk = self.raw.read(n)
        if self.feed(ctypes.byref(self.scan), chunk, len(chunk)) > MAX_DEPTH:
            raise UsageError(f"nested deeper than {MAX_DEPTH} levels: not a Chrome trace")
        if not self.head_done:
            self.head += chunk
            self.head_done = b'"traceEvents"' in self.head or len(self.head) > _HEAD_LIMIT
        self.tail = (self.tail + chunk)[-_TAIL_KEEP:]
        return chunk

    @property
    def has_events(self) -> bool:
        return b'"traceEvents"' in self.head

    def metadata(self) -> dict:
        """Top-level keys other than traceEvents, from the head and, failing that, the tail."""
        meta: dict = {}
        head = bytes(self.head)
        at = head.find(b'"traceEvents"')
        if at > 0:
            text = head[:at].decode("utf-8", "replace").strip().rstrip(",")
            try:
                meta = json.loads(text + "}") if text.startswith("{") else {}
            except json.JSONDecodeError:
                meta = {}
        for key in ("distributedInfo", "deviceProperties"):
            if key not in meta and (value := _find_value(self.tail, key)) is not None:
                meta[key] = value
        return meta


def _find_value(blob: bytes, key: str):
    match = re.search(rb'"' + key.encode() + rb'"\s*:\s*', blob)
    if not match:
        return None
    try:
        return json.JSONDecoder().raw_decode(blob[match.end():].decode("utf-8", "replace"))[0]
    except json.JSONDecodeError:
        return None


def _open(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def read_trace(path: Path, classifier: Classifier = Classifier()) -> Trace:
    """Stream one trace file into a Trace, as the reader did before issue 22; a UsageError says why a file is
    unusable."""
    seen: dict[tuple, tuple[str, KernelClass, KernelFootprint | None]] = {}
    kernels: list[KernelEvent] = []
    steps: list[tuple[str, float]] = []
    launches: dict[int, Call] = {}
    waits: list[StreamWait] = []
    records: list[int] = []
    wait_calls: list[int] = []
    event_streams: dict[int, tuple[int, int]] = {}
    graph_calls: list[int] = []
    threads: dict[int, int] = {}
    device_id = None
    try:
        with _open(path) as raw, no_cyclic_gc():
            tap = _Tap(raw)
            for ev in ijson.items(tap, "traceEvents.item", use_float=True):
                if ev.get("ph") != "X" or "dur" not in ev:
                    continue
                args = ev.get("args") or {}
                stream = args.get("stream")
                if (cat := ev.get("cat")) in _SKIPPED_CATS:
                    # HTA takes every ProfilerStep that is not GPU work (a lane and a correlation) as a
                    # step start: the GPU-side annotation too, which Kineto writes without a stream.
                    if "ProfilerStep" in (name := str(ev.get("name", ""))) and not (
                            type(stream) is int and stream >= 0 and args.get("correlation") is not None):
                        steps.append((name, _ts(ev)))
                    elif cat == "cuda_sync" and name == "Stream Wait Event" and type(stream) is int:
                        waits.append(_wait(ev, args, stream))
                    elif cat == "cuda_event" and type(stream) is int and args.get("correlation") is not None:
                        event_streams[int(args["correlation"])] = (stream, int(args.get("event_id", -1)))
                    continue
                if type(stream) is int and stream >= 0:  # Kineto's GPU lanes; not bool, which is an int too
                    kernels.append(_kernel(ev, args, stream, classifier, seen))
                    device_id = args.get("device", device_id)
                elif (corr := args.get("correlation")) is not None:
                    corr, ts, dur, tid = int(corr), _ts(ev), ev["dur"], ev.get("tid")
                    finite = (type(dur) is float or type(dur) is int) and 0 <= dur < math.inf
                    tid = threads.setdefault(tid, tid) if type(tid) is int else str(tid)  # one int per thread
                    launches[corr] = Call(ts, ts + dur if finite else ts, tid)
                    if (name := ev.get("name")) in _WAIT_CALLS:
                        wait_calls.append(corr)
                    elif type(name) is str and name.startswith(_RECORD_CALLS):
                        records.append(corr)
                    elif type(name) is str and _GRAPH_CALL in name:
                        graph_calls.append(corr)
                elif "ProfilerStep" in (name := str(ev.get("name", ""))):
                    steps.append((name, _ts(ev)))
            meta = tap.metadata()
    except UsageError:  # a refused event, named
        raise
    except (ijson.JSONError, ijson.IncompleteJSONError, UnicodeDecodeError) as exc:
        raise UsageError(f"invalid or truncated JSON ({_short(exc)})") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise UsageError(f"truncated or corrupt gzip ({_short(exc)})") from None
    except (AttributeError, KeyError, TypeError, ValueError) as exc:  # AttributeError: an event or args not an object
        raise UsageError(f"malformed trace event ({_short(exc)})") from None
    except OSError as exc:
        raise UsageError(f"cannot read ({exc.strerror or _short(exc)})") from None
    if not kernels:
        raise UsageError("no GPU kernels (record with torch.profiler activities including CUDA)" if tap.has_events
                         else "not a Chrome trace: no traceEvents")
    rank, world, notes = _rank(meta, path)
    device, note = _device(meta, device_id)
    notes += (note,) if note else ()
    kernels.sort(key=lambda k: k.ts)
    return Trace(path, rank, world, device, tuple(kernels), tuple(steps), launches, notes,
                 tuple(waits), tuple(records), tuple(wait_calls), event_streams, frozenset(graph_calls))


def _wait(ev: dict, args: dict, stream: int) -> StreamWait:
    def arg(key: str) -> int:
        value = args.get(key, -1)
        return value if type(value) is int else -1

    return StreamWait(stream, _ts(ev), arg("correlation"), arg("wait_on_cuda_event_id"), arg("wait_on_stream"),
                      arg("wait_on_cuda_event_record_corr_id"))


def _kernel(ev: dict, args: dict, stream: int, classifier: Classifier, seen: dict) -> KernelEvent:
    """A KernelEvent; name, class and footprint are computed once per distinct launch shape and shared."""
    block, grid = args.get("block"), args.get("grid")
    key = (ev.get("name"), ev.get("cat"), tuple(block) if isinstance(block, list) else block,
           tuple(grid) if isinstance(grid, list) else grid, args.get("registers per thread"), args.get("shared memory"))
    if (shared := seen.get(key)) is None:
        name = str(ev.get("name", ""))
        try:
            footprint = KernelFootprint.from_trace_event(ev) if block is not None else None
        except UsageError:
            footprint = None
        shared = seen[key] = (name, classifier.classify(name, str(ev.get("cat", "")).lower()), footprint)
    name, kind, footprint = shared
    ts, dur = _ts(ev), float(ev["dur"])
    if not 0 <= dur < math.inf:  # NaN too
        raise UsageError(f"GPU event {_name(ev)} at ts {ts}: duration {dur} us (valid: finite and >= 0)")
    bps = args.get("blocks per SM")
    collective = tuple(_scalar(args.get(a)) for a in _COLLECTIVE_ARGS) if "Collective name" in args else None
    return KernelEvent(
        name=name,
        kind=kind,
        stream=stream,
        ts=ts,
        dur=dur,
        correlation=int(args.get("correlation", -1)),
        footprint=footprint,
        blocks_per_sm=float(bps) if isinstance(bps, (int, float)) else None,
        collective=collective,
    )


def _ts(ev: dict) -> float:
    ts = float(ev["ts"])
    if not math.isfinite(ts):
        raise UsageError(f"event {_name(ev)}: ts {ts} (valid: a finite time)")
    return ts


def _name(ev: dict, width: int = 100) -> str:
    name = str(ev.get("name", ""))
    return repr(name if len(name) <= width else name[: width - 3] + "...")


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return shorten(text, 160)
