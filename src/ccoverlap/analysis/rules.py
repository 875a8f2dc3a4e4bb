"""Known misconfigurations, each a rule over one rank's trace and diagnosis, each saying what to change.

- `serialized_streams`: communication and compute on separate streams that never ran at the same time,
  although collectives were ready while compute ran on another stream: the pattern of
  CUDA_DEVICE_MAX_CONNECTIONS=1 (one hardware queue: launches of every stream in issue order, so a kernel
  waits behind whatever was issued before it), or of a stream that synchronizes with the other before each
  kernel.
- `persistent_holds_sms`: a collective waited behind a kernel with a block on every SM in one wave (a persistent
  or cooperative kernel): nothing can start beside it until it ends, and if it waits for the collective's data
  the step deadlocks.
"""
from __future__ import annotations

from dataclasses import dataclass

from ccoverlap.analysis.contention import CommWait, RankDiagnosis
from ccoverlap.analysis.mechanisms.base import SM_WAIT_TOLERANCE_US, Cause, holds_every_sm
from ccoverlap.analysis.model import KernelClass, Trace, analysed_kernels, short_name
from ccoverlap.util.demangle import demangled

#: Overlap below this share of the communication time counts as none.
NO_OVERLAP_PCT = 1.0
#: A blocker that ran through at least this share of a collective's wait held it back.
HELD_SHARE = 0.5


@dataclass(frozen=True)
class Finding:
    rule: str
    says: str  # what the trace shows
    change: str  # what to change

    @property
    def line(self) -> str:
        return f"{self.says}; {self.change}"

    def to_dict(self) -> dict:
        return {"rule": self.rule, "says": self.says, "change": self.change}


def _waited(d: RankDiagnosis) -> list[CommWait]:
    return [c for c in d.comm if c.sm_wait_us > SM_WAIT_TOLERANCE_US and not c.unresolved and c.blocker is not None]


def serialized_streams(trace: Trace, d: RankDiagnosis, overlap_us: float, env: dict[str, str]) -> Finding | None:
    kernels = analysed_kernels(trace)
    comm = {k.stream for k in kernels if k.kind is KernelClass.COMMUNICATION}
    compute = {k.stream for k in kernels if k.kind is KernelClass.COMPUTE}
    comm_us = sum(k.dur for k in kernels if k.kind is KernelClass.COMMUNICATION)
    if not comm or not compute or comm & compute or comm_us <= 0 or overlap_us > NO_OVERLAP_PCT / 100 * comm_us:
        return None
    knob = env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    # held back by compute on another stream; where the variable is not known to be set, only where the occupancy
    # model finds no resource that kept the collective out (a resource is the likelier reading then)
    held = [c for c in _waited(d) if c.blocker.stream in compute
            and (knob == "1" or c.cause in (Cause.DISPATCH_ORDER, Cause.UNKNOWN))]
    if not held:
        return None  # they never overlapped, but nothing was ready to, or SMs were full: not the streams
    cause = (f"CUDA_DEVICE_MAX_CONNECTIONS={knob} is set" if knob == "1" else
             "this is what CUDA_DEVICE_MAX_CONNECTIONS=1 does (one hardware queue: every stream's kernels in issue "
             "order), or a synchronization of the streams before each kernel")
    says = (f"communication (stream(s) {', '.join(map(str, sorted(comm)))}) and compute (stream(s) "
            f"{', '.join(map(str, sorted(compute)))}) never ran at the same time, although {len(held)} collective(s) "
            "were ready while compute ran on the other stream "
            f"({sum(c.sm_wait_us for c in held) / 1000:.3f} ms of waits)")
    change = (f"{cause}: unset it or set CUDA_DEVICE_MAX_CONNECTIONS >= 2 unless you rely on the launch order "
              "(then launch each collective before the compute it should overlap), and check that neither stream "
              "waits on the other (an event wait or a synchronize before each kernel)")
    return Finding("serialized_streams", says, change)


def persistent_holds_sms(trace: Trace, d: RankDiagnosis) -> Finding | None:
    device = d.device
    if device is None:
        return None
    cooperative = {demangled(n) for n in d.launches.cooperative} if d.launches else set()
    held: list[CommWait] = []
    for c in _waited(d):
        b = c.blocker
        if b.footprint is None or c.cause not in (Cause.REGISTERS, Cause.THREADS, Cause.SHARED_MEMORY, Cause.BLOCKS):
            continue
        one_wave = holds_every_sm(device, b.footprint)
        ran = min(b.end, c.kernel.ts) - max(b.ts, c.ready_us)
        if (one_wave or b.name in cooperative) and ran >= HELD_SHARE * c.sm_wait_us:
            held.append(c)
    if not held:
        return None
    b = max(held, key=lambda c: c.sm_wait_us).blocker
    kind = "a cooperative kernel" if b.name in cooperative else "a persistent kernel"
    says = (f"{kind}, {short_name(b.name)} ({b.footprint.grid} blocks: one wave that fills every SM), held every "
            f"SM while {len(held)} collective(s) waited ({sum(c.sm_wait_us for c in held) / 1000:.3f} ms): nothing "
            "can start beside it, and a kernel that waits for the collective's data there would never see it run "
            "(a hang)")
    change = ("leave SMs to communication: launch the collective before it, cap its grid below the SM count (a "
              "library's SM count target), or confine it to a green context of fewer SMs")
    return Finding("persistent_holds_sms", says, change)


def findings(trace: Trace, d: RankDiagnosis, overlap_us: float,
             env: dict[str, str] | None = None) -> tuple[Finding, ...]:
    """Every rule that fires on this rank (`env`: the scheduling variables its process ran with, where known)."""
    out = [serialized_streams(trace, d, overlap_us, env or {}), persistent_holds_sms(trace, d)]
    return tuple(f for f in out if f is not None)
