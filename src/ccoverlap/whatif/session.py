"""From a capture to steps: a doctor capture folder (`capture`), or a lab record with its alone traces (`lab_cases`);
from steps to predictions anchored to what was measured, or refused (`run`, `gains`)."""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ccoverlap.control import levers
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits, get_device
from ccoverlap.util.errors import UsageError
from ccoverlap.util.output import Progress
from ccoverlap.util.tracefiles import alone_trace
from ccoverlap.whatif import anchor, calibration, predict, presets, transforms
from ccoverlap.whatif.config import WhatIfConfig
from ccoverlap.whatif.dispatch import simulate
from ccoverlap.whatif.duration import Pace
from ccoverlap.whatif.step import Kernel, Step, from_trace, typical_steps
from ccoverlap.analysis import (Analysis, KernelClass, Process, analysed_indices, analyze, device_limits, read_trace,
                                short_name, windows)
from ccoverlap.analysis.mechanisms.compute_slowed import CO_RELEASED
from ccoverlap.model import nccl

#: the lab's CPU enqueues each launch this long after the previous one (an assumption, a driver launch's order of
#: magnitude: the alone traces' own launch times are the profiler's, slowed by it)
LAUNCH_US = 5.0


@dataclass(frozen=True)
class Captured:
    steps: tuple[Step, ...]  # the typical steps, in order
    notes: tuple[str, ...]
    source: str  # what the steps were read from, in words
    world: int | None = None  # the job's ranks, where the trace says
    hidden: str | None = None  # why what its kernels waited for cannot be simulated (a CUDA graph's edges), or None
    process: Process | None = None  # what the doctor's records say of the rank's process (None: no records)
    # kernel name -> its slowdown, where the doctor read it as released with a collective (compute_slowed.CO_RELEASED)
    released: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def refused(self, check: anchor.Validation) -> str | None:
        """Why no lever is predicted (`check.refused`), with the doctor's reading of the first launch off where it
        names one the simulator has no model of (a grid released with a collective)."""
        why = check.refused()
        if why and check.first_off and (x := self.released.get(check.first_off.name)):
            why += (f" (the doctor reads it as released with a collective: {x:.1f}x its time alone, which the "
                    "simulator does not model)")
        return why

    @property
    def step(self) -> Step:
        return self.steps[0]

    @property
    def step_ms(self) -> tuple[float, float] | None:
        """The rank's median step unprofiled and profiled (the doctor's records), where both are known."""
        return self.process.step_ms if self.process and all(self.process.step_ms) else None

    @property
    def profiler_slowdown(self) -> float | None:
        """What the profiler cost the steps (Process.profiler_slowdown: None where held or not recorded)."""
        return self.process.profiler_slowdown if self.step_ms else None

    @property
    def held(self) -> bool:
        """The doctor held the GPU before each profiled step (its launches queued: Process.held)."""
        return bool(self.process and self.process.held)


class Refused(Exception):
    """The simulated default does not reproduce the capture: no lever is predicted (the message says why)."""


def capture(root: Path, comm_regex: str | None = None, comm_cluster: int | None = None,
            analysis: Analysis | None = None, processes: Mapping[int, Process] | None = None) -> Captured:
    """The typical steps of the lowest rank of the doctor capture under ROOT, with its alone window; `analysis`:
    ROOT's, where the caller has read it already (the tuner: the capture is read once); `processes`: what the
    doctor's records say of ROOT's processes (analysis.analyze)."""
    a = analysis or analyze(root, comm_regex=comm_regex, processes=processes)
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
    # NCCL launches clusters where the GPU has them (sm_90 on), and none before
    cluster = comm_cluster if comm_cluster is not None else min(nccl.DEFAULT_CLUSTER, device.max_cluster_size)
    steps, notes = typical_steps(trace, device, comm_cluster=cluster)
    steps = [s for s in steps if s.kernels]
    if not steps:
        raise UsageError(f"{root}: no launch of the typical steps has a time alone")
    told = [] if comm_cluster is not None or cluster == 1 else [
        f"communication clusters of {cluster} assumed (NCCL's default on sm_90; the trace does not record them)"]
    diagnosis = next((r.diagnosis for r in a.ranks if r.strategy == name and r.rank == rank), None)
    own = (processes or {}).get(rank) or (diagnosis.process if diagnosis else None)  # as the caller's analysis read it
    released = {x.name: x.measured_us / x.alone_us for x in (diagnosis.compute_slowed if diagnosis else ())
                if x.cause == CO_RELEASED}
    hidden = next((f"cannot predict this capture: a kernel {s.hidden} (what it waited for cannot be simulated)"
                   for s in steps if s.hidden), None) or _unknown(steps) or _host_paced(own, steps)
    return Captured(tuple(steps), tuple(told + notes), f"{trace.path} (rank {rank}, strategy {name})",
                    trace.world_size, hidden, own, released)


def unprofiled(cap: Captured, measured_us: float) -> tuple[dict | None, list[str]]:
    """What the profiler cost the captured steps (the doctor's step records: the same clock inside and outside its
    window, the GPU's step period where recorded), and a note where more than the reproduction's tolerance: the
    steps simulated are the profiled ones, so each prediction is also given moved to the program's own step (its
    change from the measured step added: the profiler's cost taken as the same under every lever). A held
    capture's profiled steps were timed from before the hold's wait, so they hold the host's launching too: the
    profiler's cost is not known there, and not said; `measured_us`, the typical steps' median (the validation's),
    is then the GPU's work, and a program whose own step is longer is paced by its host."""
    if not cap.step_ms:
        return None, []
    plain, profiled = cap.step_ms
    slowdown = cap.profiler_slowdown
    out = {"step_ms": plain, "profiled_step_ms": profiled, "profiler_slowdown": slowdown, "host_paced": False,
           "scaled": "unprofiled step = the unprofiled median step + (predicted step - measured step): the time a "
                     "lever moves is the kernels' on the GPU, which the profiler's cost (its host-side launch "
                     "overhead) does not change (an assumption, checked on the held-out captures: docs/whatif.md)"}
    gpu_ms = measured_us / 1000  # the typical steps' median (anchor.Validation.measured_us): held, the GPU's work
    if cap.held and plain > gpu_ms * (1 + anchor.STEP_TOLERANCE):
        out |= {"host_paced": True,
                "scaled": "unprofiled step = the larger of the program's own step (its host's pace) and the predicted "
                          "step (the GPU's work, held): the held steps keep the GPU busy for less than the program's "
                          "own step, so its host paces it, and a lever's change to the GPU's work reaches the step "
                          "only beyond that pace"}
        return out, [f"the program's own step ({plain:.2f} ms, the doctor's step records) is longer than its GPU's "
                     f"work in a held step ({gpu_ms:.2f} ms): its host paces it, so a lever that shortens the GPU's "
                     "work does not shorten this step; 'unprofiled ms' is the larger of the two"]
    if slowdown is None or abs(slowdown) <= anchor.STEP_TOLERANCE:
        return out, []
    return out, [f"the profiler {'slowed' if slowdown > 0 else 'sped up'} the captured steps by "
                 f"{100 * abs(slowdown):.0f}% ({profiled:.2f} ms a step against {plain:.2f} ms unprofiled, the "
                 "doctor's step records): the simulated steps are the profiled ones; 'unprofiled ms' adds each "
                 "prediction's change to the program's own step"]


def _compute_streams(trace) -> set[int]:
    """The lab's compute stream(s) in an alone trace: the compute kernels' streams but the L2 flush's (the first
    kernel of a repetition, on torch's stream, outside the timed span)."""
    _, idx = windows(trace, analysed_indices(trace))[0]
    streams = {trace.kernels[i].stream for i in idx if trace.kernels[i].kind is KernelClass.COMPUTE}
    flush = trace.kernels[idx[0]].stream
    return streams - {flush} if streams - {flush} else streams


#: how NCCL_NTHREADS acted on the lab's proxy in records whose rows do not say (before 2026-12-04): its default
#: proxy, the only one they ran, is shaped as NCCL's 640-thread kernel and takes the variable as ring Simple does
#: (lab/runner.py), where a real 640-thread launch would not take it (model/nccl.protocol_of)
LAB_PROTOCOL = "SIMPLE"


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
                          release_us=len(kernels) * LAUNCH_US,
                          protocol=row.get("comm_protocol", LAB_PROTOCOL)))
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
        out[family] = (step, [r for r in rows
                              if r["status"] == "ok" and r["strategy"] not in ("comm-alone", "compute-alone")])
    return out



def gpcs(step: Step) -> int:
    """The step's GPU's GPCs, as its preset says (the H200's where none does): what clusters are placed within."""
    p = presets.peak(step.device)
    return p.gpcs if p else presets.PEAKS["h200"].gpcs


def validate(cap: Captured, cal: calibration.Calibration, pace: Pace | None = None) -> anchor.Validation:
    """The simulated default of every typical step (at `pace`, else the calibration's) against what was measured
    (`anchor`)."""
    groups = gpcs(cap.step)
    return anchor.validate(cap.steps, [simulate(s, pace or cal.pace, groups) for s in cap.steps])


def hold(cap: Captured, cal: calibration.Calibration) -> tuple[Captured, anchor.Validation]:
    """The capture with each launch the simulated default slows beyond what was measured held to the measured pace
    (`anchor.hold`, again on the held steps until no floor moves, at most `anchor.HOLD_ROUNDS` times), a note naming
    them, and the held default checked against the capture (`validate`, from the last round's simulations where no
    floor moved: each typical step simulated once less)."""
    steps, names = list(cap.steps), []
    for _ in range(anchor.HOLD_ROUNDS):
        defaults = [simulate(s, cal.pace, gpcs(s)) for s in steps]
        held, names = anchor.hold(steps, defaults)
        if held == steps:
            break
        steps = held
    else:  # the last round moved a floor: its steps are not simulated yet
        defaults = [simulate(s, cal.pace, gpcs(s)) for s in steps]
    check = anchor.validate(steps, defaults)
    if not names:
        return cap, check
    shown = ", ".join(short_name(n) for n in names[:anchor.SHOWN]) + (
        f" and {len(names) - anchor.SHOWN} more" if len(names) > anchor.SHOWN else "")
    note = (f"held to the pace the capture shows (the simulated default slowed them more for sharing than they "
            f"slowed): {shown}")
    return dataclasses.replace(cap, steps=tuple(steps), notes=cap.notes + (note,)), check


def pace_open(cap: Captured, cal: calibration.Calibration) -> anchor.Validation:
    """The capture's default simulated with no kernel slowed by another (`Pace.unshared`) against what was measured.
    Where that reproduces the capture too, the capture cannot tell how much its kernels slow each other, and a lever
    that makes them share SMs more than they did is predicted as a range (`predict.pace_range`); where it does not,
    the capture shows the slowdown."""
    return validate(cap, cal, cal.pace.unshared())


def _predict(steps: Sequence[Step], strategies, cal: calibration.Calibration,
             bar: Progress | None = None) -> list[predict.Prediction]:
    """Each strategy's prediction, the median over `steps` (the default first), with its ratio to the default in
    each step; `bar` advanced as each is simulated."""
    per_step = [predict.predict(s, strategies, cal, gpcs(s), bar and bar.advance) for s in steps]
    defaults = [rows[0] for rows in per_step]
    return [dataclasses.replace(m, steps_ratios=tuple(r for p, b in zip(rows, defaults, strict=True)
                                                      if (r := p.vs(b)) is not None))
            if (m := predict.median(rows)).status == "ok" else m for rows in zip(*per_step)]


def _anchored(p: predict.Prediction, check: anchor.Validation, ends: Sequence[predict.Prediction],
              base: predict.Prediction, open_pace: bool) -> dict:
    """A prediction as the measured step would become under it (`anchor`), the interval over every end; where the
    capture cannot tell how much kernels slow each other (`open_pace`) and the lever's step hangs on it, the range
    between the two readings instead of a point (status "range")."""
    d = p.to_dict()
    if p.status != "ok":
        return d
    lo = min([p.interval[0]] + [q.interval[0] for q in ends])
    hi = max([p.interval[1]] + [q.interval[1] for q in ends])
    d |= {"simulated_step_us": p.step_us, "step_us": check.anchor(p.step_us),
          "interval": [check.anchor(lo), check.anchor(hi)],
          "link_bound_step_us": p.link_bound_step_us and check.anchor(p.link_bound_step_us),
          "vs_capture": p.step_us / check.simulated_us}
    spans = _spans(p, base, open_pace, check)
    if not spans:
        return d
    span = (min(s[0] for s, _ in spans), max(s[1] for s, _ in spans))
    steps = [check.measured_us * r for r in span]
    return d | {"status": "range", "step_us": None, "vs_capture": None, "ratio_range": list(span),
                "step_range_us": steps, "interval": [min(d["interval"][0], steps[0]), max(d["interval"][1], steps[1])],
                "notes": d["notes"] + tuple(note for _, note in spans)}


def _spans(p: predict.Prediction, base: predict.Prediction, open_pace: bool,
           check: anchor.Validation | None = None) -> list[tuple[tuple[float, float], str]]:
    """Each reading of the lever's ratio that the capture cannot tell from the point, as (range, why)."""
    return [(span, note) for span, note in ((predict.pace_range(p, base) if open_pace else None, PACE_NOTE),
                                            (predict.other_range(p, base), OTHER_NOTE),
                                            (predict.threads_range(p, base), THREADS_NOTE),
                                            (predict.steps_range(p), STEPS_NOTE),
                                            (_unexplained(p, base, check), UNEXPLAINED_NOTE)) if span]


def _unexplained(p: predict.Prediction, base: predict.Prediction,
                 check: anchor.Validation | None) -> tuple[float, float] | None:
    """A lever's ratio carried to the fastest and the slowest of the typical steps as measured against simulated
    (`Validation.unexplained`), where these differ by more than PACE_RESOLUTION: the simulator gives the steps
    alike where they ran apart, so what a lever does to that difference is not in the model. None for the default
    (the capture itself) and where the steps agree."""
    if check is None or p is base or (spread := check.unexplained) is None or not (p.step_us and base.step_us):
        return None
    if spread[1] - spread[0] <= predict.PACE_RESOLUTION:
        return None
    ratio = p.step_us / base.step_us
    return ratio * spread[0], ratio * spread[1]


OTHER_NOTE = ("the capture cannot tell this lever's step to a point: what decides it is not in a trace (the "
              "prediction's note says what); the step lies between the two readings")
THREADS_NOTE = ("the capture cannot tell this lever's step to a point: it shows each collective at one thread count, "
                "and its time under fewer threads lies between the law fitted on the lab's proxy and one that "
                "follows its threads exactly; the step lies between the two")
PACE_NOTE = ("the capture cannot tell this lever's step to a point: under it kernels share SMs as they never did in "
             "the capture, which the simulator reproduces both with the calibrated slowdown beside others and with "
             "none; the step lies between the two")
STEPS_NOTE = ("the capture cannot tell this lever's step to a point: its typical steps disagree (the lever gains "
              "more in some than in others: a collective late in some steps, on time in others), and which is the "
              "program's usual step it cannot tell; the step lies between the least and the most of them")
UNEXPLAINED_NOTE = ("the capture cannot tell this lever's step to a point: its typical steps ran apart by more than "
                    "the simulated default gives them (the same launches slower in some steps than in others, for "
                    "something not in the model), and a lever may bring every step to the fastest of them or to the "
                    "slowest; the step lies between the two")
RANGE_NOTES = (PACE_NOTE, OTHER_NOTE, THREADS_NOTE, STEPS_NOTE, UNEXPLAINED_NOTE)


def _unknown(steps: Sequence[Step]) -> str | None:
    """Why a capture cannot be simulated where launches without a time alone (they overlapped in the alone
    window: a CUDA graph's parallel branches) took more of a typical step than the reproduction may be off: a step
    simulated without them is not the step, whatever the rest predicts."""
    worst = max(steps, key=lambda s: s.unknown_us / s.measured_us if s.measured_us else 0.0)
    if not worst.measured_us or worst.unknown_us <= anchor.STEP_TOLERANCE * worst.measured_us:
        return None
    names = ", ".join(dict.fromkeys(short_name(n) for n in worst.unknown))
    return (f"cannot predict this capture: launches without a time alone ({names}) ran "
            f"{worst.unknown_us / 1000:.3f} ms of the {worst.measured_us / 1000:.3f} ms step {worst.name} (more than "
            f"{100 * anchor.STEP_TOLERANCE:g}%): the alone window did not run them alone (docs/doctor.md)")


def _host_paced(own: Process | None, steps: Sequence[Step]) -> str | None:
    """Why a capture cannot be predicted where the profiler paced its steps by the host (the doctor's rule,
    `Process.host_paced`): the runs a lever is predicted for are unprofiled, and there the program queues its
    launches ahead of the GPU, so kernels that reached the GPU one by one in the trace may contend (on held-out
    programs, what the what-if missed most: docs/whatif.md, "Host-paced captures"). A capture held by the doctor
    (`--hold on`) had its launches queued: it is simulated as captured."""
    idle = [s.idle_us / s.measured_us for s in steps if s.measured_us and s.idle_us is not None]
    if own is None or (share := own.host_paced(idle)) is None:
        return None
    plain, profiled = own.step_ms
    return (f"cannot predict this capture: the profiler paced its steps by the host (the GPU idle {100 * share:.0f}% "
            f"of the median typical step, {profiled:.2f} ms a step against {plain:.2f} ms unprofiled), and unprofiled "
            "the program queues its launches ahead of the GPU, where they may contend as they did not here: capture "
            "it with `ccoverlap doctor --hold on`, which queues each profiled step's launches")


def run(cfg: WhatIfConfig, root: Path, processes: Mapping[int, Process] | None = None, show: bool = False) -> dict:
    """Every prediction `ccoverlap whatif` shows, as data: the step as captured first (`default`), then each
    strategy, each the median over the capture's typical steps and anchored to the measured step; none where the
    simulated default does not reproduce the capture (`refused`, unless `cfg.unvalidated`); predictions for
    another GPU or network labelled so, with their assumptions. `show`: the simulations' progress on stderr (a
    capture of long steps and every lever takes minutes)."""
    cap = capture(root, cfg.comm_regex, cfg.comm_cluster or None, processes=processes)
    assumptions: list[str] = []
    cal, cal_note = calibration.load(cap.step.device.name)
    cap, check = hold(cap, cal)
    steps = list(cap.steps)
    if cfg.busbw or cfg.world:
        world = cfg.capture_world or cap.world
        if not world or world < 2:
            raise UsageError(f"--world/--busbw need --capture-world (2 or more): the trace says {world or 'nothing'} "
                             "of the ranks the collectives ran across")
        if not cfg.capture_busbw:
            raise UsageError("--world/--busbw need --capture-busbw: the bus bandwidth the capture ran at is not in "
                             "a trace")
        moved = [presets.collectives(s, cfg.capture_busbw, cfg.busbw or cfg.capture_busbw, world, cfg.world or world)
                 for s in steps]
        steps = [s for s, _ in moved]
        assumptions.append(moved[0][1])
    variants = [steps]  # the prediction's steps, then those of the interval's ends
    if cfg.device:
        moved = [presets.to_device(s, cfg.device) for s in steps]
        variants = [list(v) for v in zip(*(m.steps for m in moved))]
        assumptions += list(moved[0].assumptions)
    own, own_notes = unprofiled(cap, check.measured_us)
    refused = (None if cfg.device else unfitted(cap.step.device.name, cal)) or cap.hidden or cap.refused(check)
    label = "predicted, assumptions: " + "; ".join(assumptions) if assumptions else "predicted for the captured GPU"
    report = {
        "source": cap.source, "captured_on": cap.step.device.name, "predicted_for": variants[0][0].device.name,
        "label": label, "assumptions": assumptions,
        "notes": own_notes + list(cap.notes) + ([cal_note] if cal_note else []), "unprofiled": own,
        "validation": check.to_dict(), "refused": None if cfg.unvalidated else refused, "unvalidated": False,
        "unpredictable": cap.hidden,
        "calibration": {"gpu": cal.gpu, "fitted_on_the_captured_gpu": cal.gpu == cap.step.device.name,
                        "error_median": cal.error_median, "error_p90": cal.error_p90, "provenance": cal.provenance},
        "anchored": "predicted step = the measured step (median of the typical steps) x simulated strategy / "
                    "simulated default (each the median over the typical steps)",
        "predictions": [],
    }
    if refused and not cfg.unvalidated:
        return report
    if refused:
        report |= {"unvalidated": True, "label": f"UNVALIDATED ({refused}); {label}"}
    strategies = [levers.strategy(s) for s in cfg.levers] or [s for s in levers.STRATEGIES]
    total = len(variants) * len(steps) * len(predict.names(strategies))
    with Progress("whatif", total) if show else contextlib.nullcontext() as bar:
        rows, *ends = [_predict(v, strategies, cal, bar) for v in variants]
    unshared = pace_open(cap, cal)
    report["pace"] = {"unshared_reproduces": unshared.reproduced, "unshared_step_error": unshared.step_error,
                      "resolution": predict.PACE_RESOLUTION}
    report["predictions"] = [_anchored(p, check, [e[n] for e in ends], rows[0], unshared.reproduced)
                             for n, p in enumerate(rows)]
    if own:  # the unprofiled step with the prediction's change (`unprofiled`): the default is that step exactly
        plain = 1000 * own["step_ms"]

        def moved(step_us: float) -> float:
            return max(plain, step_us) if own["host_paced"] else plain + step_us - check.measured_us
        for p in report["predictions"]:
            if p["status"] == "ok":
                p["unprofiled_step_us"] = moved(p["step_us"])
                p["vs_unprofiled"] = p["unprofiled_step_us"] / plain
            elif p["status"] == "range":
                p["unprofiled_range_us"] = [moved(check.measured_us * r) for r in p["ratio_range"]]
                p["vs_unprofiled_range"] = [u / plain for u in p["unprofiled_range_us"]]
    return report


def unfitted(gpu: str, cal: calibration.Calibration) -> str | None:
    """Why a capture from `gpu` cannot be predicted with `cal` (its model fitted on another GPU, or on none), or
    None: a pace fitted on one GPU says nothing checked about another's."""
    if cal.gpu == gpu:
        return None
    fitted = f"fitted on the {cal.gpu} only" if cal.gpu else "fitted on no GPU"
    return (f"no model fitted for the captured GPU ({gpu or 'unknown: no deviceProperties'}; the what-if is "
            f"{fitted}): --unvalidated predicts with those parameters, labelled unvalidated; --device D predicts "
            "the step moved to a preset GPU whose peak numbers are known, labelled with its assumptions")


def gains(root: Path, comm_regex: str | None, names: list[str],
          analysis: Analysis | None = None) -> dict[str, float]:
    """Predicted gain (share of the step, positive is faster) of each named strategy over the capture, for the
    tuner: at the best end where a trace cannot tell which binds (collectives bound by their CTAs or by their
    link) or how much kernels slow each other (`pace_open`), so a lever is pruned only where even its best case
    gains too little; strategies without
    a model are left out. UsageError where the capture cannot be simulated; Refused where its simulated
    default does not reproduce it (then no prediction may prune anything)."""
    cap = capture(root, comm_regex, analysis=analysis)
    cal, _ = calibration.load(cap.step.device.name)
    cap, check = hold(cap, cal)
    if why := unfitted(cap.step.device.name, cal) or cap.hidden or cap.refused(check):
        raise Refused(why)
    known = [levers.strategy(n) for n in names if not transforms.no_model(levers.strategy(n))]
    rows = _predict(cap.steps, known, cal)
    base, free = rows[0], pace_open(cap, cal).reproduced
    return {p.strategy: 1 - min(p.step_us / base.step_us, (p.link_bound_step_us or p.step_us) / base.step_us,
                                *(span[0] for span, _ in _spans(p, base, free, check)))
            for p in rows[1:] if p.status == "ok" and base.step_us}
