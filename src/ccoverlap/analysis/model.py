"""The trace data model: what every analysis reads of one rank's trace.

One rank's GPU activities (`KernelEvent`, classed by the `Classifier`), the CPU calls that launched them (`Call`),
CUPTI's stream waits (`StreamWait`), its profiler steps and what the reader left out (`LeftOut`), as a `Trace`;
and what the analyses read from it (the kernels that count, the GPU). Kept apart from the reader
(ccoverlap.analysis.reader), as in Holistic Trace Analysis: a trace is parsed once into this model, and the
analyses are small pure functions over it (ccoverlap.analysis.metrics) that need none of the decoding.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from operator import attrgetter
from pathlib import Path

import msgspec

from ccoverlap.model.comm import CommKernels
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import PRESETS, DeviceLimits, preset_for

_MEMORY = re.compile(r"^(Memcpy|Memset|dma)")
_MEMORY_CATS = frozenset({"gpu_memcpy", "gpu_memset", "memcpy", "memset"})
#: The kernel args that name a collective (torch's record_param_comms writes them on NCCL kernels).
_COLLECTIVE_ARGS = ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Process Group Name")
#: A rank whose left-out GPU events are more than this share of its GPU events, or of its GPU time, gets no
#: verdict: what was read is not the run.
LEFT_OUT_SHARE = 0.01


class KernelClass(str, Enum):
    COMPUTE = "compute"
    COMMUNICATION = "communication"
    MEMORY = "memory"


class KernelEvent(msgspec.Struct, frozen=True, gc=False):
    """One GPU activity (kernel, memcpy or memset); times in microseconds, as the trace. A struct, not a dataclass:
    a rank has one per activity (77,000 in a 157 MB trace), and a frozen dataclass's generated __init__ sets each
    field through object.__setattr__, several times the struct's construction in C (and its pickling)."""

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


class Call(msgspec.Struct, frozen=True, gc=False):
    """A CPU call that has a correlation id (a launch, an event record, a stream wait): when, on which thread. A
    struct, built in C: one per CPU call (210,000 in a 157 MB trace; a NamedTuple built through tuple.__new__
    took about twice as long, measured)."""

    ts: float
    end: float
    tid: int | str | None


class StreamWait(msgspec.Struct, frozen=True, gc=False):
    """CUPTI's "Stream Wait Event" record (cat cuda_sync): `stream` waits for a CUDA event. A struct, as the kernels
    and calls are: a trace with sync events has one for about every stream-wait call.

    torch 2.11 leaves wait_on_stream and the record call's correlation at -1 (unknown); the
    event id is there. `correlation` is the cudaStreamWaitEvent call's.
    """

    stream: int
    ts: float
    correlation: int
    event_id: int  # -1: unknown
    wait_on_stream: int  # the stream the event was recorded on; -1: unknown
    record_correlation: int  # the recording call's correlation; -1: unknown


_CORRELATION = attrgetter("correlation")


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
    # The topologies of the CUDA graphs the process captured (analysis/graphs.Topology), from the doctor's capture
    # (the trace has none): what a replay's kernels waited for inside the graph. Empty: unknown.
    graphs: tuple = field(default=(), repr=False)
    # Each launch's measured time alone (us), by its correlation: from the doctor's alone window, matched launch
    # by launch (analysis/alone.py); None where no alone window was measured. A launch missing from it was
    # not matched: its time alone is unknown, never inferred from other launches.
    alone_us: Mapping[int, float] | None = field(default=None, repr=False)
    left_out: LeftOut = field(default_factory=lambda: LeftOut(), repr=False)  # what the reader could not read

    @cached_property
    def calls(self) -> tuple[Call | None, ...]:
        """Each kernel's launch call (None: not in the trace), looked up once a trace: the analyses read it for
        every kernel, several times (which count, their steps, the dependency graph)."""
        return tuple(map(self.launches.get, map(_CORRELATION, self.kernels)))

    @cached_property
    def analysed_indices(self) -> tuple[int, ...]:
        """See the function analysed_indices: computed once a trace, as every analysis asks for it."""
        return _analysed_indices(self)

    @cached_property
    def analysed_kernels(self) -> tuple[KernelEvent, ...]:
        return tuple(map(self.kernels.__getitem__, self.analysed_indices))


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


@dataclass(frozen=True)
class LeftOut:
    """What the reader could not read in a trace and left out, counted: each reason one line, its first example
    named; and the shares that decide whether the rank still gets a verdict (LEFT_OUT_SHARE)."""

    lines: tuple[str, ...] = ()
    events: int = 0  # GPU events left out
    us: float = 0.0  # their GPU time, where their duration was readable
    kept: int = 0  # GPU events kept
    kept_us: float = 0.0
    steps: int = 0  # ProfilerStep annotations left out: what is analysed depends on every one of them
    calls: int = 0  # CPU calls left out whose correlation is unknown: which kernels they launched is unknown

    def withheld(self) -> str | None:
        """Why the rank gets no verdict, or None: more than LEFT_OUT_SHARE of its GPU events or GPU time, or a
        profiler step, left out."""
        total, total_us = self.events + self.kept, self.us + self.kept_us
        if self.steps:
            return f"{self.steps} profiler step annotation(s) unreadable: which kernels count is unknown"
        if self.calls:
            return (f"{self.calls} CPU call(s) without a readable correlation: which kernels they launched (and so "
                    "which count) is unknown")
        if self.events > LEFT_OUT_SHARE * total or self.us > LEFT_OUT_SHARE * total_us:
            return (f"{self.events} of {total} GPU event(s) ({self.us / max(total_us, 1e-9):.1%} of the GPU time) "
                    f"could not be read, more than {LEFT_OUT_SHARE:.0%}")
        return None


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
    return tuple(i for i, call in enumerate(trace.calls) if call is not None and call.ts < last_start)


def unlaunched(trace: Trace) -> list[KernelEvent]:
    """Kernels that analysed_kernels leaves out because their launch call is not in the trace."""
    if len({name for name, _ in trace.steps}) < 2 or None not in trace.calls:  # the test in C: 2 ms, not 11
        return []
    return [k for k, call in zip(trace.kernels, trace.calls) if call is None]


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
    return dataclasses.replace(preset, name=str(props.get("name", preset.name)), source="trace deviceProperties",
                               **read)
