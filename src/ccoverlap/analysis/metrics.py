"""Pure analyses over the trace model: overlap, exposure, slowdown, padding.

Definitions follow Holistic Trace Analysis (HTA) where HTA has one, so the
numbers agree with what PyTorch users already trust (docs/analysis.md):
overlap is the share of merged communication-kernel time covered by merged
compute-kernel time, idle time is the kernel span not covered by any GPU
activity, and the last profiler step is left out as HTA leaves it out.
"""
from __future__ import annotations

import dataclasses
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ccoverlap.analysis.trace import Kernel, KernelClass, Trace
from ccoverlap.errors import UsageError
from ccoverlap.limits import PRESETS, DeviceLimits, preset_for
from ccoverlap.occupancy import occupancy

Interval = tuple[float, float]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Union of intervals as sorted disjoint intervals; touching ones join (as HTA's merge)."""
    out: list[list[float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def length(merged: Sequence[Interval]) -> float:
    return sum(e - s for s, e in merged)


def intersection(a: Sequence[Interval], b: Sequence[Interval]) -> float:
    """Length of the intersection of two merged (sorted, disjoint) interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def subtract(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """The parts of merged list `a` that merged list `b` does not cover."""
    out: list[Interval] = []
    j = 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k, cursor = j, start
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                out.append((cursor, b[k][0]))
            cursor = max(cursor, b[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def covered(interval: Interval, merged: Sequence[Interval], starts: Sequence[float]) -> float:
    """How much of one interval the merged list covers; `starts` are the merged starts, for bisect."""
    lo, hi = interval
    total = 0.0
    i = max(bisect_right(starts, lo) - 1, 0)
    while i < len(merged) and merged[i][0] < hi:
        total += max(0.0, min(merged[i][1], hi) - max(merged[i][0], lo))
        i += 1
    return total


def analysed_kernels(trace: Trace) -> tuple[Kernel, ...]:
    """The kernels HTA analyses: with two or more profiler steps, those launched before the last one.

    The last profiled step is usually cut short by the profiler stopping, so
    HTA drops the GPU work launched in it (and GPU work whose launch is not in
    the trace); with fewer than two steps every kernel counts. As in HTA, the
    last step starts at the latest ProfilerStep annotation, CPU or GPU side:
    Kineto writes the GPU one (gpu_user_annotation) without a stream, and HTA
    reads it as a CPU event, so work launched in the last step before the GPU
    reached it still counts.
    """
    if len({name for name, _ in trace.steps}) < 2:
        return trace.kernels
    last_start = max(ts for _, ts in trace.steps)
    return tuple(
        k for k in trace.kernels if (ts := trace.launches.get(k.correlation)) is not None and ts < last_start
    )


def unlaunched(trace: Trace) -> list[Kernel]:
    """Kernels that analysed_kernels leaves out because their launch call is not in the trace."""
    if len({name for name, _ in trace.steps}) < 2:
        return []
    return [k for k in trace.kernels if k.correlation not in trace.launches]


def of_kind(kernels: Iterable[Kernel], kind: KernelClass) -> list[Kernel]:
    return [k for k in kernels if k.kind is kind]


def _merged(kernels: Iterable[Kernel]) -> list[Interval]:
    return merge((k.ts, k.end) for k in kernels)


# --- padding: which launches carry more shared memory than the same kernel's reference ---

FootprintKey = tuple[str, int, int]  # name, threads per block, registers per thread


def _key(k: Kernel) -> FootprintKey | None:
    fp = k.footprint
    return (k.name, fp.threads, fp.regs) if fp else None


def smem_reference(kernels: Iterable[Kernel]) -> dict[FootprintKey, int]:
    """Smallest shared memory seen per kernel and block shape: its unpadded footprint."""
    ref: dict[FootprintKey, int] = {}
    for k in kernels:
        if (key := _key(k)) is not None:
            ref[key] = min(ref.get(key, k.footprint.smem), k.footprint.smem)
    return ref


def pad_bytes(kernel: Kernel, reference: dict[FootprintKey, int]) -> int:
    """Shared memory above the reference for the same kernel and block shape (0 when unknown)."""
    key = _key(kernel)
    return kernel.footprint.smem - reference[key] if key in reference else 0


def padding_reference(kernels: Sequence[Kernel], baseline: Sequence[Kernel] | None) -> dict[FootprintKey, int]:
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
    kernels: Sequence[Kernel], reference: dict[FootprintKey, int], device: DeviceLimits | None
) -> list[KernelStats]:
    """Per-kernel table, longest total time first."""
    groups: dict[tuple, list[Kernel]] = defaultdict(list)
    for k in kernels:
        groups[(k.name, k.kind, _key(k))].append(k)
    out = []
    for (name, kind, _), ks in groups.items():
        pads = [pad_bytes(k, reference) for k in ks]
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


# --- per-rank metrics ---


@dataclass(frozen=True)
class RankMetrics:
    """Times in microseconds over the analysed kernels of one rank; slowdowns vs. the baseline."""

    strategy: str
    rank: int
    file: str
    kernels: int
    span_us: float  # first kernel start to last kernel end (HTA's kernel time)
    compute_us: float  # merged compute-kernel time
    communication_us: float  # merged communication-kernel time
    memory_us: float  # merged memcpy/memset time
    overlap_us: float  # communication time covered by compute
    exposed_comm_us: float  # communication time not covered by compute
    hideable_comm_us: float  # exposed communication that compute not yet overlapped could have hidden
    idle_us: float  # span not covered by any GPU activity
    comp_comm_overlap_pct: float | None  # 100 * overlap / communication (HTA's); None without communication
    compute_slowdown: float | None  # compute kernels' time / the same kernels' baseline mean time
    comm_slowdown: float | None
    padded_launches: int
    padded_kernels: tuple[KernelStats, ...]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def rank_metrics(strategy: str, trace: Trace, baseline: Trace | None = None) -> RankMetrics:
    kernels = analysed_kernels(trace)
    base = analysed_kernels(baseline) if baseline else None
    comp = _merged(of_kind(kernels, KernelClass.COMPUTE))
    comm = _merged(of_kind(kernels, KernelClass.COMMUNICATION))
    mem = _merged(of_kind(kernels, KernelClass.MEMORY))
    busy = _merged(kernels)
    comp_us, comm_us, both = length(comp), length(comm), intersection(comp, comm)
    exposed = comm_us - both
    span = busy[-1][1] - busy[0][0] if busy else 0.0
    padded = [s for s in kernel_stats(kernels, reference_for(trace, baseline), device_limits(trace.device)) if s.padded_launches]
    return RankMetrics(
        strategy=strategy,
        rank=trace.rank,
        file=str(trace.path),
        kernels=len(kernels),
        span_us=span,
        compute_us=comp_us,
        communication_us=comm_us,
        memory_us=length(mem),
        overlap_us=both,
        exposed_comm_us=exposed,
        hideable_comm_us=min(exposed, comp_us - both),
        idle_us=span - length(busy),
        comp_comm_overlap_pct=100.0 * both / comm_us if comm_us > 0 else None,
        compute_slowdown=slowdown(kernels, base, KernelClass.COMPUTE) if base else None,
        comm_slowdown=slowdown(kernels, base, KernelClass.COMMUNICATION) if base else None,
        padded_launches=sum(s.padded_launches for s in padded),
        padded_kernels=tuple(padded),
    )


#: Metrics averaged over a strategy's ranks (strategy_means).
MEAN_KEYS = (
    "comp_comm_overlap_pct", "communication_us", "exposed_comm_us", "hideable_comm_us", "compute_us", "idle_us",
    "span_us", "compute_slowdown", "comm_slowdown",
)


def strategy_means(ranks: Sequence[RankMetrics]) -> dict[str, dict[str, float | None]]:
    """Strategy -> mean over its ranks of each of MEAN_KEYS (None where no rank has the metric)."""
    out: dict[str, dict[str, float | None]] = {}
    for name in dict.fromkeys(r.strategy for r in ranks):
        mine = [r for r in ranks if r.strategy == name]
        out[name] = {"ranks": len(mine)}
        for key in MEAN_KEYS:
            vals = [v for r in mine if (v := getattr(r, key)) is not None]
            out[name][key] = sum(vals) / len(vals) if vals else None
    return out


def slowdown(kernels: Sequence[Kernel], baseline: Sequence[Kernel], kind: KernelClass) -> float | None:
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
    kernel: Kernel
    exposed_us: float  # of its duration, the part no compute kernel ran beside


def exposed_intervals(kernels: Sequence[Kernel]) -> list[Interval]:
    """When communication ran with no compute beside it."""
    return subtract(_merged(of_kind(kernels, KernelClass.COMMUNICATION)), _merged(of_kind(kernels, KernelClass.COMPUTE)))


def exposed_comm(kernels: Sequence[Kernel]) -> list[ExposedComm]:
    """Each communication kernel's exposed time, most exposed first."""
    comp = _merged(of_kind(kernels, KernelClass.COMPUTE))
    starts = [s for s, _ in comp]
    out = [ExposedComm(k, k.dur - covered((k.ts, k.end), comp, starts)) for k in of_kind(kernels, KernelClass.COMMUNICATION)]
    return sorted(out, key=lambda e: -e.exposed_us)
