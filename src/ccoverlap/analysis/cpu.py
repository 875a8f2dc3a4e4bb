"""The CPU timeline of a rank that ran without a GPU (gloo, e.g. DDP under torchrun on the CPU): its exposed
communication and overlap, by the same metrics as a GPU trace's (metrics.METRICS over metrics.RankTimes).

A CPU trace has no kernels; what stands for them here: communication is gloo's work, which torch's
ProcessGroupGloo records on its worker threads as "gloo:<collective>" (and any op a --comm-regex names);
compute is the time the other threads spend inside an aten operator (every computation of torch on the CPU
runs in one). The time between them is not compute: Python, the autograd engine, and a wait for a
collective, which torch records as no operator of its own (a blocking all-reduce in a DDP comm hook waits
inside the autograd node that ran the hook: counting every cpu_op as compute would hide it). User
annotations (ProfilerStep, Optimizer.step, DDP.forward) are labels, not work. Each becomes a KernelEvent on a lane per
thread, so the one definition of each metric (exposed communication: communication time with no compute beside it) and
HTA's window (every step but the last) apply unchanged. What needs a GPU (SM waits, their causes, every lever's effect)
is not claimed: the levers that need one are named from control.levers.LEVERS.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ccoverlap.analysis.metrics import METRICS, RankTimes, Value, metric
from ccoverlap.analysis.model import Call, Classifier, KernelClass, KernelEvent, Trace
from ccoverlap.analysis.reader import Problem, discover, read_document
from ccoverlap.util.errors import UsageError
from ccoverlap.util.output import print_table
from ccoverlap.control.levers import LEVERS

#: the name prefix of gloo's work on its threads (ProcessGroupGloo's RECORD_FUNCTION)
GLOO = "gloo:"
#: the name prefix of torch's operators: the CPU's compute (cpu_ops outside them are wrappers or waits)
ATEN = "aten::"
#: the metrics a CPU timeline gives, in the terminal table's order (the rest need a GPU or a baseline)
SHOWN = ("comp_comm_overlap_pct", "communication_us", "exposed_comm_us", "compute_us", "idle_us")


@dataclass(frozen=True)
class CpuRank:
    """One rank's CPU timeline metrics (METRICS keys, times in microseconds, over every step but the last)."""

    rank: int
    file: str
    steps: int  # the profiler steps analysed
    values: dict[str, Value]

    def exposed_per_step_ms(self) -> float | None:
        return self.values["exposed_comm_us"] / 1000 / self.steps if self.steps else None

    def to_dict(self) -> dict:
        return {"rank": self.rank, "file": self.file, "steps": self.steps, **self.values,
                "exposed_comm_per_step_ms": self.exposed_per_step_ms()}


def timeline(path: Path, doc: dict, classifier: Classifier = Classifier()) -> Trace | None:
    """The CPU timeline of a trace as a Trace (None: it has GPU work, or no communication on the CPU)."""
    raw = doc.get("traceEvents") if isinstance(doc.get("traceEvents"), list) else []
    # GPU work, readable or not (a kernel of negative dur is one too): never a CPU verdict
    if any(isinstance(e, dict) and e.get("cat") == "kernel" for e in raw):
        return None
    events = [e for e in raw if isinstance(e, dict) and e.get("ph") == "X" and _time(e.get("ts"))
              and _time(e.get("dur")) and isinstance(e.get("tid"), (int, str, type(None)))]  # a thread that is
    # no int or text (a list) has no lane
    comm = [e for e in events if str(e.get("name", "")).startswith(GLOO) or classifier.comm(str(e.get("name", "")))]
    if not comm:
        return None
    comm_threads, comm_ids = {e.get("tid") for e in comm}, {id(e) for e in comm}
    compute = [e for e in events if e.get("cat") == "cpu_op" and e.get("tid") not in comm_threads
               and str(e.get("name", "")).startswith(ATEN) and id(e) not in comm_ids]
    lanes: dict = {}
    spans = sorted([(e, KernelClass.COMMUNICATION) for e in comm] + [(e, KernelClass.COMPUTE) for e in compute],
                   key=lambda p: float(p[0]["ts"]))
    kernels = tuple(KernelEvent(str(e["name"]), kind, lanes.setdefault(e.get("tid"), len(lanes)), float(e["ts"]),
                                float(e["dur"]), i, None, None) for i, (e, kind) in enumerate(spans))
    steps = tuple((str(e["name"]), float(e["ts"])) for e in events if "ProfilerStep" in str(e.get("name", "")))
    info = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    rank = info.get("rank") if isinstance(info.get("rank"), int) else 0
    # each span its own "launch" at its start: the window rule (launched before the last step) reads it
    launches = {k.correlation: Call(k.ts, k.end, k.stream) for k in kernels}
    return Trace(path, rank, info.get("world_size"), None, kernels, steps, launches)


def _time(v) -> bool:
    """A usable time: a finite, non-negative number, not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def of_trace(trace: Trace) -> CpuRank:
    times = RankTimes.of(trace, None)
    analysed = max(len({name for name, _ in trace.steps}) - 1, 0) or 1  # HTA leaves the last step out
    return CpuRank(trace.rank, str(trace.path), analysed, {m.key: m.value(times) for m in METRICS if not m.judged})


def analyze_cpu(files: Sequence[Path], comm_regex: str | None = None) -> tuple[list[CpuRank], list[Problem]]:
    """The CPU timeline metrics of each trace that has no GPU work and gloo communication, by rank; the others
    become problems (one line each)."""
    classifier = Classifier.with_user_regex(comm_regex)
    ranks: dict[int, CpuRank] = {}
    problems: list[Problem] = []
    for path in files:
        try:
            trace = timeline(path, read_document(path), classifier)
        except UsageError as exc:
            problems.append(Problem(path, f"skipped: {exc}"))
            continue
        if trace is None:
            problems.append(Problem(path, "skipped: GPU work, or no communication on its CPU timeline (gloo's)"))
        elif trace.rank in ranks:
            problems.append(Problem(path, f"skipped: rank {trace.rank} again"))
        else:
            ranks[trace.rank] = of_trace(trace)
    return [ranks[r] for r in sorted(ranks)], problems


def analyze_folders(root: Path, comm_regex: str | None = None) -> tuple[dict[str, list[CpuRank]], list[Problem]]:
    """analyze_cpu over every strategy folder under ROOT (reader.discover): strategy -> its ranks (those with any)."""
    out: dict[str, list[CpuRank]] = {}
    problems: list[Problem] = []
    for name, files in discover(root).items():
        ranks, bad = analyze_cpu(files, comm_regex)
        problems += bad
        if ranks:
            out[name] = ranks
    return out, problems


def document(strategies: dict[str, list[CpuRank]]) -> dict:
    """The JSON of a CPU analysis (analyze --json, doctor --json)."""
    return {"timeline": "cpu", "strategies": {name: [r.to_dict() for r in ranks] for name, ranks in strategies.items()},
            "levers_needing_a_gpu": gpu_levers()}


def verdict(ranks: Sequence[CpuRank]) -> str:
    """One line: the exposed communication per step, the mean over the ranks, and what needs a GPU."""
    per_step = [v for r in ranks if (v := r.exposed_per_step_ms()) is not None]
    mean = sum(per_step) / len(per_step) if per_step else None
    shown = "unknown" if mean is None else f"{mean:.3f} ms"
    return (f"exposed communication {shown} per step on the CPU timeline (mean over {len(ranks)} rank(s)); "
            f"{lever_line()}")


def print_cpu(strategies: dict[str, list[CpuRank]], title: str) -> None:
    """The terminal's table of a CPU analysis and each strategy's verdict line."""
    print_table(title, ["strategy", *columns()], [[name, *row(r)] for name, ranks in strategies.items() for r in ranks])
    for name, ranks in strategies.items():
        print(f"verdict {name}: {verdict(ranks)}")


def gpu_levers() -> list[str]:
    """The levers that need a GPU: those whose platforms (control.levers.LEVERS) do not include the CPU."""
    return [lv.name for lv in LEVERS if "cpu" not in lv.platforms]


def columns() -> list[str]:
    return ["rank", "steps", *(metric(k).column.short if metric(k).column else metric(k).label for k in SHOWN),
            "exposed/step"]


def row(r: CpuRank) -> list[str]:
    per_step = r.exposed_per_step_ms()
    return [str(r.rank), str(r.steps), *(metric(k).show(r.values[k]) for k in SHOWN),
            "-" if per_step is None else f"{per_step:.3f}"]


def lever_line() -> str:
    """What a CPU run cannot be told, in one line."""
    return (f"levers that need a GPU (CUDA or ROCm), not judged on a CPU run: {', '.join(gpu_levers())}; "
            "where a collective waited and why needs GPU kernels in the trace: try `ccoverlap example`")
