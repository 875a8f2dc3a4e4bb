"""Each lever as a transformation of a captured step: TRANSFORMS, keyed by lever name and checked against
control/levers.py LEVERS at import; a lever without a model has NotApplicable there: it is said so, never guessed.

What a transformation may not know it says in its `Transformed.notes`. Collective durations under another CTA
or thread count come from the communication bandwidth law (`CommLaw`, fitted by `calibration`), always as a
ratio to the captured time alone, so a real collective keeps its own measured time at its own shape.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ccoverlap.control import levers
from ccoverlap.model import nccl
from ccoverlap.model.planner import plan
from ccoverlap.util.text import shorten
from ccoverlap.whatif import residency
from ccoverlap.whatif.step import Kernel, Step

#: cuBLAS/cuBLASLt and CUTLASS GEMM kernels: what torch's SM carveout reaches
GEMM = re.compile(r"gemm|cutlass|xmma|nvjet|cublas", re.IGNORECASE)
#: the protocol NCCL_NTHREADS is read for where a launch's threads do not say (nccl.protocol_of; ring Simple:
#: the large messages' protocol)
PROTOCOL = "SIMPLE"


@dataclass(frozen=True)
class CommLaw:
    """A collective's bandwidth by shape, alone: each CTA moves `per_cta` (relative units) scaled by
    (threads / 640) ** `thread_exponent`, up to `saturation` CTAs' worth; its time alone is inversely
    proportional. Fitted on the lab's proxy (`calibration`)."""

    saturation: float = 16.0  # CTAs at 640 threads at which the bandwidth stops growing
    thread_exponent: float = 1.0

    def rate(self, ctas: int, threads: int) -> float:
        return min(ctas * (threads / nccl.NCCL_THREADS) ** self.thread_exponent, self.saturation)

    def time_ratio(self, old: tuple[int, int], new: tuple[int, int]) -> float:
        """Time alone at shape `new` over time alone at `old`, shapes (CTAs, threads)."""
        return self.rate(*old) / self.rate(*new)


#: a collective bound by its link, not its CTAs: its time alone does not change with its shape (a trace does
#: not say which binds; `predict` gives both ends)
LINK_BOUND = CommLaw(saturation=1e-9)


def threads_exact(law: CommLaw) -> CommLaw:
    """`law` with each CTA's bandwidth following its threads exactly (exponent 1: every thread's share of the work
    done in turn, as a set-time kernel's is): the other end, from the fitted exponent, of how a collective's time
    follows its threads. A capture shows each collective at one shape only, so it cannot tell the two apart."""
    return dataclasses.replace(law, thread_exponent=1.0)


def rethreads_comm(strategy: levers.Strategy) -> bool:
    """Does the strategy change the communication kernels' threads (so the law's thread exponent matters)?"""
    return any(name == "nccl-threads" for name, _ in strategy.levers)


@dataclass(frozen=True)
class Transformed:
    step: Step
    notes: tuple[str, ...] = ()


Transform = Callable[[Step, str, CommLaw], Transformed]


def _comm(step: Step, fn: Callable[[Kernel], Kernel]) -> Step:
    return step.with_kernels(lambda k: fn(k) if k.comm else k)


def _compute(step: Step, fn: Callable[[Kernel], Kernel]) -> Step:
    return step.with_kernels(lambda k: k if k.comm or k.footprint is None else fn(k))


def priority(step: Step, _value: str, _law: CommLaw) -> Transformed:
    greatest = step.device.stream_priority_range[1]
    comm_streams = {step.kernels[i].stream for i in step.comm}
    return Transformed(step.replace(priorities={**step.priorities, **{s: greatest for s in comm_streams}}))


def shape(step: Step, _value: str, _law: CommLaw, keep_time: bool = False) -> Transformed:
    """Each compute kernel launched while a collective was in flight (the interposer's gate: Step.launched_in_flight)
    padded as the interposer's auto plan pads it against each communication footprint of the step (the largest
    feasible pad; drain by grid); infeasible plans, and launches made with no collective in flight, left as they are.
    A padded kernel's CTAs keep the work they did alone, in more waves; `keep_time`: its grid keeps its time alone
    instead (fewer of its blocks on each SM lose it no throughput: the other reading, `UNSURE`)."""
    comms = {step.kernels[i].footprint for i in step.comm}
    gated = step.launched_in_flight()
    notes = []

    def pad(k: Kernel) -> Kernel:
        pads = []
        for c in comms:
            p = plan(step.device, k.footprint, c, drain=None)
            if p.feasible:
                pads.append(p.pad_bytes)
        if not pads:
            notes.append(f"{k.name[:40]}: no feasible pad")
            return k
        return dataclasses.replace(k, footprint=k.footprint.padded(max(pads)),
                                   basis=None if keep_time else k.measured[0])

    kernels = tuple(pad(k) if i in gated and not k.comm and k.footprint is not None else k
                    for i, k in enumerate(step.kernels))
    return Transformed(step.replace(kernels=kernels), tuple(dict.fromkeys(notes)))


def _hinted(value: str) -> Callable[[Kernel], Kernel]:
    """A kernel with its preferred carveout set to `value`; its time alone stays the one measured without it.
    An SM a hinted kernel finds idle takes the hinted configuration (whatif/residency.py: `hinted_config`), and a
    block of another kernel starts there only where `beside`, with the hinted kernel as the resident, lets it."""
    return lambda k: dataclasses.replace(k, hint=int(value), basis=k.measured[0])


def carveout_hint(step: Step, value: str, _law: CommLaw) -> Transformed:
    return Transformed(_compute(step, _hinted(value)))


def comm_carveout_hint(step: Step, value: str, _law: CommLaw) -> Transformed:
    """The communication kernels hinted: an SM whose first CTA is a collective's (priority dispatches it first onto
    idle SMs) is configured for the hint, not for the collective's own need, so compute's blocks fit beside it."""
    return Transformed(_comm(step, _hinted(value)))


def _sms(step: Step, value: str) -> int:
    ctas = max((step.kernels[i].footprint.grid for i in step.comm), default=0)
    return levers.comm_sms(ctas, step.device.sm_count) if value == "auto" else int(value)


def sm_carveout(step: Step, value: str, _law: CommLaw) -> Transformed:
    """cuBLAS GEMMs on `sm_count - N` SMs: a grid of one CTA per SM or more (persistent) shrinks to the SMs
    left, each CTA doing the share of the work the removed ones did; other kernels are not reached."""
    n = _sms(step, value)
    left = step.device.sm_count - n

    def confine(k: Kernel) -> Kernel:
        if not GEMM.search(k.name):
            return k
        fp = k.footprint
        grid = fp.grid
        if grid >= step.device.sm_count and grid % step.device.sm_count == 0:
            per = grid // step.device.sm_count
            fp = dataclasses.replace(fp, grid=per * left)
        return dataclasses.replace(k, footprint=fp, sms=(0, left), basis=k.measured[0])

    gemms = sum(1 for k in step.kernels if not k.comm and k.footprint and GEMM.search(k.name))
    return Transformed(_compute(step, confine),
                       () if gemms else ("no GEMM kernel in the step: the SM carveout reaches none",))


def green(step: Step, value: str, _law: CommLaw) -> Transformed:
    """Every compute kernel confined to `sm_count - N` SMs, its grid unchanged (libraries size their grids for
    the whole device); communication keeps every SM."""
    left = step.device.sm_count - _sms(step, value)
    return Transformed(_compute(step, lambda k: dataclasses.replace(k, sms=(0, left))))


def _nccl_shape(step: Step, env: dict[str, str], law: CommLaw) -> Transformed:
    knobs = nccl.Knobs.from_env(env)
    notes = list(knobs.notes)

    def reshape(k: Kernel) -> Kernel:
        fp = k.footprint
        ctas = knobs.channels(fp.grid) if "NCCL_MAX_CTAS" in env or "NCCL_MIN_CTAS" in env else fp.grid
        threads = fp.threads
        if "NCCL_NTHREADS" in env:
            if (protocol := k.protocol or nccl.protocol_of(fp.threads)) is None:
                protocol = PROTOCOL
                notes.append(f"{k.name[:40]}: {fp.threads} threads fit no protocol's rule; ring Simple assumed")
            threads = knobs.threads(protocol, fp.threads)
        cluster = nccl.cluster_dim(knobs.cluster if "NCCL_CGA_CLUSTER_SIZE" in env else fp.cluster, ctas)
        ratio = law.time_ratio((fp.grid, fp.threads), (ctas, threads))
        new = dataclasses.replace(fp, grid=ctas, threads=threads, cluster=cluster)
        return dataclasses.replace(k, footprint=new, alone_us=k.alone_us * ratio, basis=None)

    step = _comm(step, reshape)
    return Transformed(step, tuple(dict.fromkeys(notes)))


def _env_lever(name: str) -> Transform:
    def t(step: Step, value: str, law: CommLaw) -> Transformed:
        return _nccl_shape(step, dict(levers.BY_NAME[name].setting(value).env), law)
    t.__doc__ = f"{name}: the communication kernels' shape as NCCL reads its variable (model/nccl.Knobs)"
    return t


def max_connections(step: Step, value: str, _law: CommLaw) -> Transformed:
    return Transformed(step.replace(queues=int(value)))


class NoModelHere(ValueError):
    """A lever whose model covers some captures only: this capture is outside it (the message says why)."""


def nccl_cta_policy(step: Step, value: str, _law: CommLaw) -> Transformed:
    """The step unchanged where NCCL never acts on the policy for any of its collectives (model/nccl.CTA_POLICY_REACH,
    judged by each collective kernel's name); where it may act on one, or a name does not say, there is no model."""
    reach = {k.name: nccl.cta_policy_reaches(value, k.name) for k in (step.kernels[i] for i in step.comm)}
    if unsure := [name for name, may in reach.items() if may is not False]:
        raise NoModelHere(f"NCCL_CTA_POLICY={value} may act on {shorten(unsure[0], 60)}"
                          + ("" if reach[unsure[0]] else " (its name names no collective)")
                          + f": {nccl.CTA_POLICY_REACH[value]}")
    return Transformed(step, (f"NCCL_CTA_POLICY={value} changes none of the step's collectives: "
                              f"{nccl.CTA_POLICY_REACH[value]}",))


TRANSFORMS: Mapping[str, Transform | levers.NotApplicable] = levers.mechanisms("what-if transform", {
    "priority": priority, "shape": shape, "carveout-hint": carveout_hint,
    "comm-carveout-hint": comm_carveout_hint, "sm-carveout": sm_carveout,
    "green": green, "nccl-ctas": _env_lever("nccl-ctas"), "nccl-threads": _env_lever("nccl-threads"),
    "nccl-cluster": _env_lever("nccl-cluster"), "max-connections": max_connections,
    "nccl-cta-policy": nccl_cta_policy,
})


@dataclass(frozen=True)
class Unsure:
    """A lever whose effect turns on what no trace shows: `other` transforms the step under the other reading, and
    `why` says what decides between the two (the prediction is then the range between them)."""

    why: str
    other: Transform


def _unchanged(step: Step, _value: str, _law: CommLaw) -> Transformed:
    return Transformed(step)


#: the levers a capture cannot pin down, and their other reading. torch's SM carveout reaches a cuBLAS GEMM only where
#: cuBLAS's heuristic picks a kernel that honours its SM count target (measured: the nvjet kernels of torch 2.11 /
#: CUDA 13 on Hopper did not, bench/known persistent_gemm and heldout_mlp). A padded kernel's time alone was measured
#: with its own blocks per SM only (measured: the timers of bench/known keep each CTA's time, so a padded grid takes
#: longer; heldout_scatter's gather and atomic scatter-add lost nothing, 1.001 realized; docs/whatif.md).
UNSURE: Mapping[str, Unsure] = {
    "sm-carveout": Unsure("whether the library honours sm-carveout for its kernels is not in the trace (torch 2.11's "
                          "nvjet GEMMs on Hopper were measured not to)", _unchanged),
    "shape": Unsure("how a padded kernel's throughput follows fewer of its blocks per SM is not in the trace (its "
                    "time alone was measured at its own residency): its CTAs keep their work, or its grid its time",
                    lambda step, value, law: shape(step, value, law, keep_time=True)),
}


def unsure(strategy: levers.Strategy) -> list[str]:
    """What decides the strategy's levers of UNSURE, one line each (empty: the trace pins it down)."""
    return [UNSURE[name].why for name, _ in strategy.levers if name in UNSURE]


def reshapes_comm(strategy: levers.Strategy) -> bool:
    """Does the strategy change the communication kernels' CTAs or threads (so the comm law matters)?"""
    return any(name in ("nccl-ctas", "nccl-threads") for name, _ in strategy.levers)


def no_model(strategy: levers.Strategy) -> list[str]:
    """The strategy's levers without a what-if model."""
    return [name for name, _ in strategy.levers if isinstance(TRANSFORMS[name], levers.NotApplicable)]


def apply(step: Step, strategy: levers.Strategy, law: CommLaw, other: bool = False) -> Transformed:
    """The step under `strategy` (no-overlap: every kernel after the one launched before it); `other`: its levers of
    UNSURE under their other reading. A lever without a model is a ValueError: callers check `no_model` first."""
    if strategy.no_overlap:
        return Transformed(step.replace(serial=True))
    notes: list[str] = []
    captured = step
    for name, value in strategy.levers:
        transform = UNSURE[name].other if other and name in UNSURE else TRANSFORMS[name]
        if isinstance(transform, levers.NotApplicable):
            raise ValueError(f"{name} has no what-if model")
        out = transform(step, value, law)
        step, notes = out.step, notes + list(out.notes)
    if given_up := l1_given_up(captured, step):
        notes.append(given_up)
    return Transformed(step, tuple(dict.fromkeys(notes)))


def l1_given_up(captured: Step, step: Step) -> str | None:
    """What no capture shows, said where a lever configures SMs for more shared memory than a compute kernel ran
    with (a pad, a carveout hint): the L1 cache it gives up, and how the kernel's time follows it (each kernel's
    time alone was measured at its own configuration; a kernel that reuses data through L1 slows, a streaming one
    does not). None where no compute kernel's configuration grows."""
    dev = captured.device
    pairs = [(before.name, residency.config_for(dev, before.footprint, before.hint),
              residency.config_for(dev, after.footprint, after.hint))
             for before, after in zip(captured.kernels, step.kernels)
             if not after.comm and after.footprint is not None and before.footprint is not None]
    grown = [(name, was, now) for name, was, now in pairs if now > was]
    if not grown:
        return None
    name, was, now = max(grown, key=lambda g: g[2] - g[1])
    # counts and sizes only, no times: the note is the same for every typical step, so it is said once
    return (f"{len(grown)} of {len(pairs)} compute launch(es) run on SMs configured for more shared memory than they "
            f"ran with (up to {was // 1024} -> {now // 1024} KB: {shorten(name, 50)}), so with less L1: their time "
            "alone with it is not in the capture and is taken as unchanged (a kernel that reuses data through L1 "
            "may run slower)")
