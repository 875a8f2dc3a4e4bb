"""The annotated trace (`--perfetto FILE`): every rank's captured trace in one Chrome trace-event file, plus
tracks of what the analysis found, for the viewer PyTorch users already open (ui.perfetto.dev,
chrome://tracing, TensorBoard's trace view).

Per rank: its processes renamed "rank R: ..." (pids renumbered, flow ids kept apart, so ranks never collide),
its GPU streams named for what runs on them (compute, communication, memory), and one more process, "rank R:
ccoverlap findings", with a lane of exposed communication (metrics.exposed_intervals: the one definition), the
SM-wait span of each collective that waited (its cause and blocker in the event's args) and the lever
recommended, as an instant event. The findings are not GPU work (no stream, category "ccoverlap"), so HTA and
ccoverlap read the same kernels from this file as from the original. `annotate` is a pure function of the
documents and the analysis; `write` reads the files the analysis read and writes the result.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ccoverlap.analysis.contention import SM_WAIT_TOLERANCE_US, CommWait
from ccoverlap.analysis.metrics import RankMetrics, exposed_intervals
from ccoverlap.analysis.model import KernelClass, Trace, analysed_kernels, short_name
from ccoverlap.analysis.reader import read_document
from ccoverlap.util.output import write_json

#: the category of every event this module adds: not one of Kineto's (kernel, gpu_memcpy, ...), so no reader
#: takes a finding for GPU work
CATEGORY = "ccoverlap"
SCHEMA = 1
#: per rank, the findings process's lanes (tid -> name); SM waits that overlap take more lanes after SM_WAIT
EXPOSED, VERDICT, SM_WAIT = 1, 2, 3
#: Kineto's metadata that this module rewrites per rank (the rest is kept as it is)
_RENAMED = frozenset({"process_name", "process_labels", "process_sort_index", "thread_name"})
_FLOWS = frozenset({"s", "t", "f"})
#: the lane names, in this order where a stream runs several kinds
_KINDS = (KernelClass.COMPUTE, KernelClass.COMMUNICATION, KernelClass.MEMORY)


@dataclass(frozen=True)
class Rank:
    """What the annotated trace is made of for one rank: its captured document, its model, its analysis."""

    label: str  # "rank 0", or "<strategy> rank 0" where the analysis holds several strategies
    document: Mapping  # the captured trace as read (traceEvents and Kineto's top-level keys)
    trace: Trace
    metrics: RankMetrics


def annotate(ranks: Sequence[Rank]) -> dict:
    """One Chrome trace-event document: every rank's events (pids renumbered), its lanes named, its findings.
    Top-level "ccoverlap" says which pids are whose (and the rank's distributedInfo and deviceProperties), so a
    rank's own trace can be taken out again."""
    events: list[dict] = []
    index: list[dict] = []
    next_pid = 1
    for number, r in enumerate(ranks):
        raw = r.document.get("traceEvents") or []
        pids = {pid: next_pid + i
                for i, pid in enumerate(dict.fromkeys(e.get("pid") for e in raw if e.get("ph") != "M"))}
        findings = next_pid + len(pids)
        next_pid = findings + 1
        events += _captured(raw, pids, number, r)
        events += _findings(findings, r)
        index.append({"label": r.label, "strategy": r.metrics.strategy, "rank": r.metrics.rank, "file": r.metrics.file,
                      "pids": sorted(pids.values()), "findings_pid": findings,
                      "distributedInfo": r.document.get("distributedInfo"),
                      "deviceProperties": r.document.get("deviceProperties")})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "ccoverlap": {"schema": SCHEMA, "ranks": index,
                          "how": "open in https://ui.perfetto.dev (Open trace file) or chrome://tracing (Load)"}}


def _captured(raw: Iterable[dict], pids: Mapping, number: int, r: Rank) -> list[dict]:
    """The rank's own events, renumbered, with its processes and GPU lanes renamed; `number`: the rank's index
    in the file."""
    labels = {e.get("pid"): (e.get("args") or {}).get("labels") for e in raw
              if e.get("ph") == "M" and e.get("name") == "process_labels"}
    lanes = _lanes(raw, r.trace)
    out = []
    for e in raw:
        if (pid := e.get("pid")) not in pids:  # metadata of a process with no events (Kineto names every GPU)
            continue
        if e.get("ph") == "M" and e.get("name") in _RENAMED:
            continue
        e = dict(e, pid=pids[pid])
        if e.get("ph") in _FLOWS and "id" in e:  # correlation ids are per process: kept apart across ranks
            e["id"] = _flow_id(e["id"], number)
        out.append(e)
    for pid, new in pids.items():
        what = labels.get(pid) or ("GPU" if any(p == pid for p, _ in lanes) else str(pid) or "(no pid)")
        out += [_meta("process_name", new, 0, name=f"{r.label}: {what}"),
                _meta("process_sort_index", new, 0, sort_index=new)]
    threads = {(e.get("pid"), e.get("tid")): (e.get("args") or {}).get("name") for e in raw
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    for (pid, tid), name in (threads | lanes).items():  # a GPU stream's lane by what runs on it
        if pid in pids and name is not None:
            out.append(_meta("thread_name", pids[pid], tid, name=name))
    return out


def _flow_id(flow, number: int) -> int | str:
    """A flow id unique across ranks: the rank's index in the high bits of Kineto's integer ids (viewers read
    integer ids; below 2**53, JavaScript's exact integers, for up to 2**21 ranks), else a prefixed string."""
    if type(flow) is int and 0 <= flow < 1 << 32:
        return number << 32 | flow
    return f"{number}:{flow}"


def _lanes(raw: Iterable[dict], trace: Trace) -> dict[tuple, str]:
    """(pid, tid) of each GPU stream's lane -> its name: the kinds of kernel it ran, then the stream."""
    kinds: dict[int, set[KernelClass]] = {}
    for k in trace.kernels:
        kinds.setdefault(k.stream, set()).add(k.kind)
    out = {}
    for e in raw:
        stream = (e.get("args") or {}).get("stream") if e.get("ph") == "X" else None
        if type(stream) is int and stream in kinds and (key := (e.get("pid"), e.get("tid"))) not in out:
            out[key] = f"{' + '.join(k.value for k in _KINDS if k in kinds[stream])} (stream {stream})"
    return out


def _findings(pid: int, r: Rank) -> list[dict]:
    """The findings process of one rank: exposed communication, each SM wait, the lever recommended."""
    out = [_meta("process_name", pid, 0, name=f"{r.label}: ccoverlap findings"),
           _meta("process_sort_index", pid, 0, sort_index=pid),
           _meta("thread_name", pid, EXPOSED, name="exposed communication"),
           _meta("thread_name", pid, VERDICT, name="lever recommended")]
    for lo, hi in exposed_intervals(analysed_kernels(r.trace)):
        out.append(_span("exposed communication", pid, EXPOSED, lo, hi,
                         what="communication kernel time with no compute kernel beside it (HTA's definition)"))
    waits = sorted((c for c in r.metrics.diagnosis.comm if c.sm_wait_us > SM_WAIT_TOLERANCE_US),
                   key=lambda c: c.ready_us)
    ends: list[float] = []  # each SM-wait lane's last end: overlapping waits go on lanes of their own
    for c in waits:
        lane = next((i for i, end in enumerate(ends) if end <= c.ready_us), len(ends))
        if lane == len(ends):
            ends.append(0.0)
            out.append(_meta("thread_name", pid, SM_WAIT + lane, name="SM wait" + (f" ({lane + 1})" if lane else "")))
        ends[lane] = c.kernel.ts
        out.append(_span(f"SM wait: {c.cause.value}", pid, SM_WAIT + lane, c.ready_us, c.kernel.ts, **_wait_args(c)))
    v = r.metrics.verdict
    at = (max(waits, key=lambda c: c.sm_wait_us).ready_us if waits
          else (r.trace.kernels[0].ts if r.trace.kernels else 0.0))
    best = v.recommendations[0] if v.recommendations else None
    out.append({"ph": "i", "s": "t", "cat": CATEGORY, "pid": pid, "tid": VERDICT, "ts": at,
                "name": f"try {best.lever}" if best else "no lever recommended",
                "args": {"verdict": v.line, "headroom_ms": v.headroom_ms, "lever_headroom_ms": v.lever_headroom_ms,
                         "recommendations": [rec.to_dict() for rec in v.recommendations]}})
    return out


def _wait_args(c: CommWait) -> dict:
    k = c.kernel
    return {"collective": short_name(k.name), "kernel": k.name, "stream": k.stream, "step": c.step,
            "sm_wait_ms": c.sm_wait_us / 1000, "cause": c.cause.value, "ready_by": c.ready_by,
            "blocker": c.blocker.name if c.blocker else (c.blocked_by[0] if c.blocked_by else None),
            "blocked_by": list(c.blocked_by), "exposed_ms": {part: us / 1000 for part, us in c.exposed.items()},
            "skew_ms": c.skew_us / 1000}


def _span(name: str, pid: int, tid: int, lo: float, hi: float, **args) -> dict:
    return {"ph": "X", "cat": CATEGORY, "name": name, "pid": pid, "tid": tid, "ts": lo, "dur": max(hi - lo, 0.0),
            "args": args}


def _meta(kind: str, pid: int, tid: int, **args) -> dict:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": args}


def ranks_of(result) -> list[Rank]:
    """The Rank of every rank the analysis kept a trace of (analyze(keep_traces=True)), its file read again."""
    several = len(result.strategies) > 1
    out = []
    for r in result.ranks:
        trace = result.strategies[r.strategy][r.rank]
        out.append(Rank(f"{r.strategy} rank {r.rank}" if several else f"rank {r.rank}", read_document(trace.path),
                        trace, r))
    return out


def write(result, path: Path) -> Path:
    """The annotated trace of `result` at `path` (written whole or not at all: util.output.write_json)."""
    return write_json(path, annotate(ranks_of(result)))
