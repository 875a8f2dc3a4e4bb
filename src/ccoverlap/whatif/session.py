"""From a capture to steps: a doctor capture folder (`capture`), or a lab record with its alone traces (`lab_cases`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ccoverlap.control import levers
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits, get_device
from ccoverlap.util.errors import UsageError
from ccoverlap.util.tracefiles import alone_trace
from ccoverlap.whatif import calibration, predict, presets, transforms
from ccoverlap.whatif.config import WhatIfConfig
from ccoverlap.whatif.step import Kernel, Step, from_trace
from ccoverlap.analysis import KernelClass, analysed_indices, analyze, device_limits, read_trace, windows
from ccoverlap.model import nccl

#: the lab's CPU enqueues each launch this long after the previous one (an assumption, a driver launch's order of
#: magnitude: the alone traces' own launch times are the profiler's, slowed by it)
LAUNCH_US = 5.0


@dataclass(frozen=True)
class Captured:
    step: Step
    notes: tuple[str, ...]
    source: str  # what the step was read from, in words
    world: int | None = None  # the job's ranks, where the trace says


def capture(root: Path, comm_regex: str | None = None, comm_cluster: int | None = None) -> Captured:
    """The first analysed step of the lowest rank of the doctor capture under ROOT, with its alone window."""
    a = analyze(root, comm_regex=comm_regex)
    if not a.strategies:
        raise UsageError(f"{root}: no usable trace (see `ccoverlap analyze {root}`)")
    name = root.name if root.name in a.strategies else next(iter(a.strategies))
    rank = min(a.strategies[name])
    trace = a.strategies[name][rank]
    if not trace.alone_us:
        alone = alone_trace(trace.path)
        if bad := next((p for p in a.problems if p.path == alone), None):  # there, but unreadable: say why
            raise UsageError(f"{bad}: each launch's time alone is what the simulator starts from")
        raise UsageError(f"{root}: the trace has no alone window matched (capture it with `ccoverlap doctor`): "
                         "each launch's time alone is what the simulator starts from")
    device = device_limits(trace.device) or get_device("h200")
    cluster = comm_cluster if comm_cluster is not None else nccl.DEFAULT_CLUSTER
    step, notes = from_trace(trace, device, comm_cluster=cluster)
    if not step.kernels:
        raise UsageError(f"{root}: no launch of the analysed step has a time alone")
    told = [] if comm_cluster is not None else [f"communication clusters of {cluster} assumed (NCCL's default on "
                                                "sm_90; the trace does not record them)"]
    return Captured(step, tuple(told + notes), f"{trace.path} (rank {rank}, strategy {name})", trace.world_size)


def _compute_streams(trace) -> set[int]:
    """The lab's compute stream(s) in an alone trace: the compute kernels' streams but the L2 flush's (the first
    kernel of a repetition, on torch's stream, outside the timed span)."""
    _, idx = windows(trace, analysed_indices(trace))[0]
    streams = {trace.kernels[i].stream for i in idx if trace.kernels[i].kind is KernelClass.COMPUTE}
    flush = trace.kernels[idx[0]].stream
    return streams - {flush} if streams - {flush} else streams


def lab_case(trace_path: Path, row: dict, sweep_row: dict, device: DeviceLimits) -> Step:
    """One lab case as a Step: its compute family's launches alone (the profiler trace of the compute phase by
    itself: each launch's duration is its time alone, scaled so the phase spans the lab's compute-alone time:
    the trace was taken in another process), launched LAUNCH_US apart, and the proxy after them, shaped as the
    lab's comm-alone row says, with the case's comm-alone time."""
    trace = read_trace(trace_path)
    alone = {k.correlation: k.dur for k in trace.kernels}
    step, _ = from_trace(trace, device, alone=alone, streams=_compute_streams(trace))
    if len({k.stream for k in step.kernels}) != 1:
        raise ValueError(f"{trace_path}: compute on several streams, expected the lab's one")
    span = _span(trace, step)
    scale = row["compute_alone_ms"] * 1000 / span
    kernels = [dataclasses.replace(k, alone_us=k.alone_us * scale, release_us=n * LAUNCH_US)
               for n, k in enumerate(step.kernels)]
    fp = KernelFootprint(row["comm_threads"], sweep_row["regs"], sweep_row["static_smem"], sweep_row["dynamic_smem"],
                         row["comm_ctas"], row["comm_cluster"], "comm_proxy")
    kernels.append(Kernel("comm_proxy", fp, row["comm_alone_ms"] * 1000, stream=-1, comm=True,
                          release_us=len(kernels) * LAUNCH_US))
    return step.replace(kernels=tuple(kernels))


def _span(trace, step: Step) -> float:
    """From the first to the last end of the step's launches in the trace (us)."""
    names = {k.name for k in step.kernels}
    _, idx = windows(trace, analysed_indices(trace))[0]
    ks = [trace.kernels[i] for i in idx if trace.kernels[i].name in names]
    return max(k.end for k in ks) - min(k.ts for k in ks)


def lab_cases(record: dict, capture: dict, root: Path, device: DeviceLimits) -> dict[str, tuple[Step, list[dict]]]:
    """Family -> (its Step, its measured rows that ran) from a `ccoverlap lab` record and the what-if capture
    (bench/device/whatif_record.py) whose traces lie under ROOT."""
    out = {}
    for family, info in capture["families"].items():
        rows = [r for r in record["rows"] if r["compute"] == family]
        alone = next((r for r in rows if r["strategy"] == "comm-alone"), None)
        if alone is None:
            continue
        sweep = next(s for s in capture["comm_sweep"] if s["comm"] == alone["comm"])
        step = lab_case(root / info["trace"], alone, sweep, device)
        out[family] = (step, [r for r in rows if r["status"] == "ok" and r["strategy"] not in ("comm-alone", "compute-alone")])
    return out



def _gpcs(step: Step) -> int:
    p = presets.peak(step.device)
    return p.gpcs if p else presets.PEAKS["h200"].gpcs


def run(cfg: WhatIfConfig, root: Path) -> dict:
    """Every prediction `ccoverlap whatif` shows, as data: the step as captured first (`default`), then each
    strategy; predictions for another GPU or network labelled so, with their assumptions."""
    cap = capture(root, cfg.comm_regex, cfg.comm_cluster or None)
    step, assumptions = cap.step, []
    cal, cal_note = calibration.load(step.device.name)
    if cfg.busbw or cfg.world:
        world = cfg.capture_world or cap.world
        if not world or world < 2:
            raise UsageError(f"--world/--busbw need --capture-world (2 or more): the trace says {world or 'nothing'} "
                             "of the ranks the collectives ran across")
        if not cfg.capture_busbw:
            raise UsageError("--world/--busbw need --capture-busbw: the bus bandwidth the capture ran at is not in a trace")
        step, note = presets.collectives(step, cfg.capture_busbw, cfg.busbw or cfg.capture_busbw, world, cfg.world or world)
        assumptions.append(note)
    steps = (step,)
    if cfg.device:
        moved = presets.to_device(step, cfg.device)
        steps, assumptions = moved.steps, assumptions + list(moved.assumptions)
    strategies = [levers.strategy(s) for s in cfg.levers] or [s for s in levers.STRATEGIES]
    gpcs = _gpcs(steps[0])
    rows = predict.predict(steps[0], strategies, cal, gpcs)
    ends = [predict.predict(s, strategies, cal, gpcs) for s in steps[1:]]
    base = rows[0]
    out = []
    for n, p in enumerate(rows):
        d = p.to_dict()
        if p.status == "ok":
            lo, hi = p.interval
            for other in ends:
                q = other[n]
                lo, hi = min(lo, q.interval[0]), max(hi, q.interval[1])
            d |= {"interval": [lo, hi], "vs_capture": p.vs(base)}
        out.append(d)
    return {
        "source": cap.source, "captured_on": cap.step.device.name, "predicted_for": steps[0].device.name,
        "label": "predicted, assumptions: " + "; ".join(assumptions) if assumptions else "predicted for the captured GPU",
        "assumptions": assumptions, "notes": list(cap.notes) + ([cal_note] if cal_note else []),
        "calibration": {"gpu": cal.gpu, "error_median": cal.error_median, "error_p90": cal.error_p90,
                        "provenance": cal.provenance},
        "predictions": out,
    }


def gains(root: Path, comm_regex: str | None, names: list[str]) -> dict[str, float]:
    """Predicted gain (share of the step, positive is faster) of each named strategy over the capture, for the
    tuner: at the better of the two ends where a trace cannot tell which binds (collectives bound by their CTAs
    or by their link), so a lever is pruned only where even its best case gains too little; strategies without
    a model are left out. UsageError where the capture cannot be simulated."""
    cap = capture(root, comm_regex)
    cal, _ = calibration.load(cap.step.device.name)
    known = [levers.strategy(n) for n in names if not transforms.no_model(levers.strategy(n))]
    rows = predict.predict(cap.step, known, cal, _gpcs(cap.step))
    base = rows[0].step_us
    return {p.strategy: 1 - min(p.step_us, p.link_bound_step_us or p.step_us) / base
            for p in rows[1:] if p.status == "ok" and base}
