"""The trace data model and its typed reader.

A torch.profiler / Kineto Chrome trace is decoded once (msgspec, into typed
structs that hold only the fields read: a cpu_op's shapes are skipped, never
built) into a `Trace`: the GPU activities of one rank with what the analyses
need and nothing else; every analysis is a pure function of the model
(ccoverlap.analysis.metrics).
"""
from __future__ import annotations

import dataclasses
import gc
import gzip
import json
import math
import re
import zlib
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property, partial
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET, UnsetType

from ccoverlap.util.errors import UsageError
from ccoverlap.util.text import shorten
from ccoverlap.model.comm import CommKernels
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import PRESETS, DeviceLimits, preset_for

_MEMORY = re.compile(r"^(Memcpy|Memset|dma)")
_MEMORY_CATS = frozenset({"gpu_memcpy", "gpu_memset", "memcpy", "memset"})
#: On GPU lanes but not GPU work: annotations, cuda_sync (a host or stream waiting), cuda_event (an event recorded).
_SKIPPED_CATS = frozenset({"gpu_user_annotation", "cuda_sync", "cuda_event", "Trace", "trace"})
#: CPU calls that record a CUDA event, and that make a stream wait for one (runtime and driver API).
_RECORD_CALLS = ("cudaEventRecord", "cuEventRecord")  # name prefixes: cudaEventRecordWithFlags too
_WAIT_CALLS = frozenset({"cudaStreamWaitEvent", "cuStreamWaitEvent"})
_GRAPH_CALL = "GraphLaunch"  # in the name of a call that replays a CUDA graph (cudaGraphLaunch, cuGraphLaunch)
#: The kernel args that name a collective (torch's record_param_comms writes them on NCCL kernels).
_COLLECTIVE_ARGS = ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Process Group Name")


class KernelClass(str, Enum):
    COMPUTE = "compute"
    COMMUNICATION = "communication"
    MEMORY = "memory"


@dataclass(frozen=True, slots=True)
class KernelEvent:
    """One GPU activity (kernel, memcpy or memset); times in microseconds, as the trace."""

    name: str
    kind: KernelClass
    stream: int
    ts: float
    dur: float
    correlation: int  # links to the CPU launch call; -1 when absent
    footprint: KernelFootprint | None  # block, registers and shared memory, from the kernel's args
    blocks_per_sm: float | None  # Kineto's 'blocks per SM': grid blocks / SMs, not residency
    collective: tuple | None = None  # _COLLECTIVE_ARGS' values, where the kernel's args name a collective

    @property
    def end(self) -> float:
        return self.ts + self.dur


class Call(NamedTuple):
    """A CPU call that has a correlation id (a launch, an event record, a stream wait): when, on which thread."""

    ts: float
    end: float
    tid: int | str | None


_call = partial(tuple.__new__, Call)  # Call(...) without NamedTuple's Python-level __new__: once per CPU call


@dataclass(frozen=True, slots=True)
class StreamWait:
    """CUPTI's "Stream Wait Event" record (cat cuda_sync): `stream` waits for a CUDA event.

    torch 2.11 leaves wait_on_stream and the record call's correlation at -1 (unknown); the
    event id is there. `correlation` is the cudaStreamWaitEvent call's.
    """

    stream: int
    ts: float
    correlation: int
    event_id: int  # -1: unknown
    wait_on_stream: int  # the stream the event was recorded on; -1: unknown
    record_correlation: int  # the recording call's correlation; -1: unknown


@dataclass(frozen=True)
class Trace:
    """The GPU side of one rank's trace, plus what ties kernels to profiler steps."""

    path: Path
    rank: int
    world_size: int | None
    device: dict | None  # the rank's entry of Kineto's deviceProperties
    kernels: tuple[KernelEvent, ...]  # sorted by start
    steps: tuple[tuple[str, float], ...]  # (ProfilerStep name, start: CPU, or GPU annotation) in trace order
    launches: dict[int, Call] = field(repr=False)  # correlation -> the CPU call (launch, record, wait) with it
    notes: tuple[str, ...] = ()  # what the reader should know (e.g. a guessed rank)
    waits: tuple[StreamWait, ...] = ()  # CUPTI's Stream Wait Event records (with CUDA sync events on)
    records: tuple[int, ...] = ()  # correlations of the event-record calls, in trace order
    wait_calls: tuple[int, ...] = ()  # correlations of the stream-wait calls, in trace order
    event_streams: dict[int, tuple[int, int]] = field(default_factory=dict, repr=False)  # record call's
    # correlation -> (stream, event id), from Kineto's cuda_event records where the trace has them
    graph_calls: frozenset[int] = frozenset()  # correlations of the calls that replayed a CUDA graph
    # Each launch's measured time alone (us), by its correlation: from the doctor's alone window, matched launch
    # by launch (analysis/alone.py); None where no alone window was measured. A launch missing from it was
    # not matched: its time alone is unknown, never inferred from other launches.
    alone_us: Mapping[int, float] | None = field(default=None, repr=False)

    @cached_property
    def analysed_indices(self) -> tuple[int, ...]:
        """See the function analysed_indices: computed once a trace, as every analysis asks for it."""
        return _analysed_indices(self)

    @cached_property
    def analysed_kernels(self) -> tuple[KernelEvent, ...]:
        return tuple(self.kernels[i] for i in self.analysed_indices)


@dataclass(frozen=True)
class Classifier:
    """Kernel classes by name: communication (model/comm.py: what the interposer leaves alone too), memory,
    compute (the rest)."""

    comm: CommKernels = field(default_factory=CommKernels)

    @classmethod
    def with_user_regex(cls, regex: str | None) -> Classifier:
        """Also communication: kernels matching `regex` (POSIX extended; a bad one is a one-line UsageError)."""
        return cls(CommKernels(regex or None))

    def classify(self, name: str, cat: str) -> KernelClass:
        if self.comm(name):
            return KernelClass.COMMUNICATION
        if cat in _MEMORY_CATS or _MEMORY.match(name):
            return KernelClass.MEMORY
        return KernelClass.COMPUTE


class _Lane(msgspec.Struct, gc=False):
    """The args that say what an event is: GPU work (a stream) or a CPU call with a correlation id."""

    stream: Any = None
    correlation: Any = None


class _Event(msgspec.Struct, gc=False):
    """One trace event, only the fields every event is judged by; msgspec skips the other keys (a cpu_op's shapes
    among them) without building them."""

    ph: Any = None
    cat: Any = None
    name: Any = ""
    ts: Any = UNSET
    dur: Any = UNSET
    tid: Any = None
    args: _Lane | None = None


class _Args(msgspec.Struct, gc=False):
    """The args of the events the model keeps in full (kernels, sync records), decoded for those events only."""

    stream: Any = None
    correlation: Any = None
    device: Any = None
    event_id: Any = -1
    wait_on_cuda_event_id: Any = -1
    wait_on_stream: Any = -1
    wait_on_cuda_event_record_corr_id: Any = -1
    block: Any = None
    grid: Any = None
    registers: Any = msgspec.field(name="registers per thread", default=None)
    smem: Any = msgspec.field(name="shared memory", default=UNSET)
    blocks_per_sm: Any = msgspec.field(name="blocks per SM", default=None)
    collective: Any = msgspec.field(name="Collective name", default=UNSET)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    dtype: Any = None
    group: Any = msgspec.field(name="Process Group Name", default=None)


class _Kept(msgspec.Struct, gc=False):
    args: _Args = msgspec.field(default_factory=_Args)


class _File(msgspec.Struct, gc=False):
    """The top level: each event kept as its span of the text (msgspec.Raw), decoded one at a time, so the decoded
    events never pile up in memory."""

    traceEvents: list[msgspec.Raw] | UnsetType = UNSET
    distributedInfo: Any = None
    deviceProperties: Any = None


_FILE = msgspec.json.Decoder(_File)
_EVENT = msgspec.json.Decoder(_Event)
_KEPT = msgspec.json.Decoder(_Kept)
_NO_LANE = _Lane()
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


def _load(path: Path) -> bytes | bytearray:
    """The whole JSON text: msgspec decodes one buffer, so a .gz is inflated in 1 MiB chunks into one bytearray
    (the memory cost: the uncompressed text, once)."""
    if not path.name.endswith(".gz"):
        return path.read_bytes()
    text = bytearray()
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            text += chunk
    return text


def read_trace(path: Path, classifier: Classifier = Classifier()) -> Trace:
    """Decode one trace file into a Trace (typed: only the fields read are built); a UsageError says why a file
    is unusable."""
    try:
        doc = _FILE.decode(_load(path))
    except msgspec.ValidationError as exc:
        if " - at `$" not in str(exc):  # JSON, but not an object
            raise UsageError("not a Chrome trace: no traceEvents") from None
        raise UsageError(f"malformed trace event ({_short(exc)})") from None
    except RecursionError:  # msgspec's bound on nesting (a Chrome trace nests a few levels)
        raise UsageError("nested too deeply: not a Chrome trace") from None
    except msgspec.DecodeError as exc:
        raise UsageError(f"invalid or truncated JSON ({_short(exc)})") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise UsageError(f"truncated or corrupt gzip ({_short(exc)})") from None
    except OSError as exc:
        raise UsageError(f"cannot read ({exc.strerror or _short(exc)})") from None
    try:
        with _no_cyclic_gc():
            return _model(path, doc, classifier)
    except UsageError:  # a refused event, named
        raise
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        raise UsageError(f"malformed trace event ({_short(exc)})") from None


def _model(path: Path, doc: _File, classifier: Classifier) -> Trace:
    """The Trace of a decoded file: what each event is, in one pass."""
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
    decode, kept, events = _EVENT.decode, _KEPT.decode, doc.traceEvents
    for raw in events or ():
        ev = decode(raw)
        if ev.ph != "X" or ev.dur is UNSET:
            continue
        lane = ev.args or _NO_LANE
        stream = lane.stream
        if (cat := ev.cat) in _SKIPPED_CATS:
            # HTA takes every ProfilerStep that is not GPU work (a lane and a correlation) as a
            # step start: the GPU-side annotation too, which Kineto writes without a stream.
            if "ProfilerStep" in (name := str(ev.name)) and not (
                    type(stream) is int and stream >= 0 and lane.correlation is not None):
                steps.append((name, _ts(ev)))
            elif cat == "cuda_sync" and name == "Stream Wait Event" and type(stream) is int:
                waits.append(_wait(ev, kept(raw).args, stream))
            elif cat == "cuda_event" and type(stream) is int and lane.correlation is not None:
                event_streams[int(lane.correlation)] = (stream, int(kept(raw).args.event_id))
            continue
        if type(stream) is int and stream >= 0:  # Kineto's GPU lanes; not bool, which is an int too
            args = kept(raw).args
            kernels.append(_kernel(ev, args, stream, classifier, seen))
            device_id = args.device if args.device is not None else device_id
        elif (corr := lane.correlation) is not None:
            corr, ts, dur, tid = int(corr), _ts(ev), ev.dur, ev.tid
            finite = (type(dur) is float or type(dur) is int) and 0 <= dur < math.inf
            tid = threads.setdefault(tid, tid) if type(tid) is int else str(tid)  # one int per thread
            launches[corr] = _call((ts, ts + dur if finite else ts, tid))
            if (name := ev.name) in _WAIT_CALLS:
                wait_calls.append(corr)
            elif type(name) is str and name.startswith(_RECORD_CALLS):
                records.append(corr)
            elif type(name) is str and _GRAPH_CALL in name:
                graph_calls.append(corr)
        elif "ProfilerStep" in (name := str(ev.name)):
            steps.append((name, _ts(ev)))
    if not kernels:
        raise UsageError("no GPU kernels (record with torch.profiler activities including CUDA)"
                         if events is not UNSET else "not a Chrome trace: no traceEvents")
    meta = {"distributedInfo": doc.distributedInfo, "deviceProperties": doc.deviceProperties}
    rank, world, notes = _rank(meta, path)
    kernels.sort(key=lambda k: k.ts)
    return Trace(path, rank, world, _device(meta, device_id), tuple(kernels), tuple(steps), launches, notes,
                 tuple(waits), tuple(records), tuple(wait_calls), event_streams, frozenset(graph_calls))


def _wait(ev: _Event, args: _Args, stream: int) -> StreamWait:
    def arg(value) -> int:
        return value if type(value) is int else -1

    return StreamWait(stream, _ts(ev), arg(args.correlation), arg(args.wait_on_cuda_event_id),
                      arg(args.wait_on_stream), arg(args.wait_on_cuda_event_record_corr_id))


@contextmanager
def _no_cyclic_gc():
    """The parse allocates millions of small objects and no reference cycles: the cyclic collector would only
    rescan them, again and again as they pile up (10-25% of the parse time, measured)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _kernel(ev: _Event, args: _Args, stream: int, classifier: Classifier, seen: dict) -> KernelEvent:
    """A KernelEvent; name, class and footprint are computed once per distinct launch shape and shared."""
    block, grid, smem = args.block, args.grid, args.smem
    key = (ev.name, ev.cat, tuple(block) if isinstance(block, list) else block,
           tuple(grid) if isinstance(grid, list) else grid, args.registers, None if smem is UNSET else smem)
    if (shared := seen.get(key)) is None:
        name = str(ev.name)
        footprint = None
        if block is not None:
            launch = {"block": block, "grid": grid, "registers per thread": args.registers}
            try:
                footprint = KernelFootprint.from_trace_event({"name": name, "args": launch | (
                    {} if smem is UNSET else {"shared memory": smem})})
            except UsageError:
                pass
        shared = seen[key] = (name, classifier.classify(name, "" if ev.cat is None else str(ev.cat).lower()),
                              footprint)
    name, kind, footprint = shared
    ts, dur = _ts(ev), float(ev.dur)
    if not 0 <= dur < math.inf:  # NaN too
        raise UsageError(f"GPU event {_name(ev)} at ts {ts}: duration {dur} us (valid: finite and >= 0)")
    bps = args.blocks_per_sm
    collective = None if args.collective is UNSET else tuple(_scalar(v) for v in (
        args.collective, args.in_nelems, args.out_nelems, args.dtype, args.group))
    return KernelEvent(
        name=name,
        kind=kind,
        stream=stream,
        ts=ts,
        dur=dur,
        correlation=-1 if args.correlation is None else int(args.correlation),
        footprint=footprint,
        blocks_per_sm=float(bps) if isinstance(bps, (int, float)) else None,
        collective=collective,
    )


def _scalar(value):
    """A JSON value as a key: lists and objects (not what torch writes there) as their text."""
    return value if value is None or isinstance(value, (str, int, float)) else json.dumps(value)


def _ts(ev: _Event) -> float:
    """An event's start; a time that is not finite refuses the trace (every analysis would be wrong)."""
    if ev.ts is UNSET:
        raise UsageError(f"event {_name(ev)}: no ts")
    ts = float(ev.ts)
    if not math.isfinite(ts):
        raise UsageError(f"event {_name(ev)}: ts {ts} (valid: a finite time)")
    return ts


def _name(ev: _Event, width: int = 100) -> str:
    name = str(ev.name)
    return repr(name if len(name) <= width else name[: width - 3] + "...")


def _rank(meta: dict, path: Path) -> tuple[int, int | None, tuple[str, ...]]:
    info = meta.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    world = info.get("world_size") if isinstance(info.get("world_size"), int) else None
    if isinstance(info.get("rank"), int):
        return info["rank"], world, ()
    if match := _RANK_IN_NAME.search(path.name):
        return int(match.group(1)), world, ("no distributedInfo rank: rank taken from the file name",)
    return 0, world, ("no distributedInfo rank and none in the file name: taken as rank 0",)


def _device(meta: dict, device_id) -> dict | None:
    """The deviceProperties entry of the GPU the kernels ran on (Kineto lists every visible GPU)."""
    props = meta.get("deviceProperties")
    props = [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []
    return next((p for p in props if p.get("id") == device_id), props[0] if props else None)


_BASIC_TYPES = frozenset("float double int long unsigned char bool short signed half Half BFloat16 complex array "
                         "const operator lambda ul u".split())


def _template_hint(args: str) -> str:
    """The names in a kernel's first template argument that has any, without namespaces, numbers and basic
    types: what tells apart the many instances of one templated kernel (FillFunctor; AUnaryFunctor, MulFunctor)."""
    depth, start = 0, 0
    for i, ch in enumerate(args + ","):
        depth += ch in "<([{"
        depth -= ch in ">)]}"
        if depth < 0 or (depth == 0 and ch == ","):
            arg = re.sub(r"[A-Za-z_]\w*::", "", args[start:i]).split("(")[0]
            names = [n for n in re.findall(r"[A-Za-z_]\w*", arg) if n not in _BASIC_TYPES]
            if names or depth < 0:
                return ", ".join(dict.fromkeys(names))
            start = i + 1
    return ""


def short_name(name: str, width: int = 64) -> str:
    """A kernel name without return type and argument list, its template reduced to the names that tell its
    instances apart (`vectorized_elementwise_kernel<FillFunctor>`): C++ names run to hundreds of characters."""
    base = re.sub(r"^void ", "", name).replace("(anonymous namespace)::", "")
    cut = re.search(r"(?<! )[<(]", base)  # "Memcpy HtoD (Pageable -> Device)" stays whole
    head = base[: cut.start() if cut else len(base)]
    hint = _template_hint(base[cut.start() + 1:]) if cut and base[cut.start()] == "<" else ""
    if hint:
        if len(head) + len(hint) + 2 > width:
            head = head.rsplit("::", 1)[-1]  # the namespace goes before the part that tells instances apart
        head = f"{head}<{hint}>"
    return head if len(head) <= width else head[: width - 3] + "..."


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return shorten(text, 160)


# --- what the analyses read from a trace: the kernels that count, the GPU ---

def analysed_kernels(trace: Trace) -> tuple[KernelEvent, ...]:
    """The kernels HTA analyses (see analysed_indices)."""
    return trace.analysed_kernels


def analysed_indices(trace: Trace) -> tuple[int, ...]:
    """The kernels HTA analyses, as indices into trace.kernels: with two or more profiler steps, those launched
    before the last one.

    The last profiled step is usually cut short by the profiler stopping, so
    HTA drops the GPU work launched in it (and GPU work whose launch is not in
    the trace); with fewer than two steps every kernel counts. As in HTA, the
    last step starts at the latest ProfilerStep annotation, CPU or GPU side:
    Kineto writes the GPU one (gpu_user_annotation) without a stream, and HTA
    reads it as a CPU event, so work launched in the last step before the GPU
    reached it still counts.
    """
    return trace.analysed_indices


def _analysed_indices(trace: Trace) -> tuple[int, ...]:
    if len({name for name, _ in trace.steps}) < 2:
        return tuple(range(len(trace.kernels)))
    last_start = max(ts for _, ts in trace.steps)
    launches = trace.launches
    return tuple(i for i, k in enumerate(trace.kernels)
                 if (call := launches.get(k.correlation)) is not None and call.ts < last_start)


def unlaunched(trace: Trace) -> list[KernelEvent]:
    """Kernels that analysed_kernels leaves out because their launch call is not in the trace."""
    if len({name for name, _ in trace.steps}) < 2:
        return []
    return [k for k in trace.kernels if k.correlation not in trace.launches]


def device_limits(props: dict | None) -> DeviceLimits | None:
    """The occupancy limits of the GPU named in a trace's deviceProperties (None if unknown)."""
    if not props:
        return None
    name = str(props.get("name", "")).lower()
    major, minor = props.get("computeMajor"), props.get("computeMinor")
    preset = next((p for key, p in PRESETS.items() if key in name), None)
    if preset is None:
        preset = preset_for((major, minor))
    if preset is None:
        return None
    fields = {
        "sm_count": "numSms", "max_threads_per_sm": "maxThreadsPerMultiprocessor",
        "regs_per_sm": "regsPerMultiprocessor", "smem_per_sm": "sharedMemPerMultiprocessor",
        "smem_per_block_optin": "sharedMemPerBlockOptin",
    }
    read = {ours: int(props[theirs]) for ours, theirs in fields.items() if isinstance(props.get(theirs), int)}
    return dataclasses.replace(preset, name=str(props.get("name", preset.name)), source="trace deviceProperties", **read)


TRACE_SUFFIXES = (".json", ".json.gz")


def trace_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))


def discover(root: Path) -> dict[str, list[Path]]:
    """Strategy name -> trace files: ROOT's own files, and one strategy per subfolder with traces.

    `ccoverlap bench --trace` writes one folder per strategy, each with
    rank{r}_trace.json.gz, so its output folder is analysed as it is.
    """
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory")
    found = {root.name: trace_files(root)} | {d.name: trace_files(d) for d in sorted(root.iterdir()) if d.is_dir()}
    found = {name: files for name, files in found.items() if files}
    if not found:
        raise UsageError(f"{root}: no trace files (*.json, *.json.gz) in it or in its subfolders")
    return found


@dataclass(frozen=True)
class Problem:
    """A file that could not be analysed, or something the reader should know about one."""

    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def grouped(problems: Sequence[Problem]) -> list[str]:
    """One line per kind of problem (its message with the numbers masked), with a count and the files: six ranks
    with the same note make one line, not six (the first file's message stands for the others)."""
    kinds: dict[str, list[Problem]] = {}
    for p in problems:
        kinds.setdefault(re.sub(r"\d+(?:\.\d+)?", "#", p.message), []).append(p)
    out = []
    for same in kinds.values():
        paths = list(dict.fromkeys(p.path for p in same))
        where = str(paths[0]) if len(paths) == 1 else (
            f"{len(paths)} files in {paths[0].parent}: {', '.join(p.name for p in paths)}"
            if len({p.parent for p in paths}) == 1 else f"{len(paths)} files: {', '.join(map(str, paths))}")
        out.append(f"{where}: {same[0].message}" + (" (numbers from the first)" if len({p.message for p in same}) > 1
                                                    else ""))
    return out


def read_traces(files: list[Path], classifier: Classifier) -> tuple[dict[int, Trace], list[Problem]]:
    """One strategy's traces by rank; unusable files and duplicate ranks become problems."""
    traces: dict[int, Trace] = {}
    problems: list[Problem] = []
    for path in files:
        try:
            trace = read_trace(path, classifier)
        except UsageError as exc:
            problems.append(Problem(path, f"skipped: {exc}"))
            continue
        problems += [Problem(path, note) for note in trace.notes]
        if trace.rank in traces:
            problems.append(Problem(path, f"skipped: rank {trace.rank} again (already read from {traces[trace.rank].path.name})"))
            continue
        traces[trace.rank] = trace
    return dict(sorted(traces.items())), problems
