"""What a capture leaves per rank besides its trace: rank<r>_steps.jsonl, written by the program, read by the command.

One JSON object a line, each written whole by one write() as it happens, so a program killed at any point
(SIGKILL included) leaves every line before it: first the process (its rank, pid, host, the window asked for),
then one line per optimizer step (host milliseconds from the end of the previous step, GPU milliseconds
between CUDA events at the same two points where CUDA is in use, and whether the profiler was warming up or
recording), and the window's opening and closing, then the alone window's (its steps marked `alone`: every
launch serialized); under the tuner, a fingerprint of the trained parameters and the step after which the
capture ended the process. The name ends in .jsonl, not .json: `ccoverlap analyze`
takes every *.json in a folder for a trace. A second process of the same rank (one that spawned its own
optimizer) writes rank<r>_pid<pid>_*: nothing is overwritten.

A job across nodes writes every rank's files into one folder, the same path on every node (a shared file
system): the rank in a file's name is the job's global rank, as the job's own launcher numbers it
(`identity`), and the header names the host and the node. A rank whose node does not share the folder leaves
its files on that node: `missing` names the ranks the folder lacks.
"""
from __future__ import annotations

import dataclasses
import errno
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ccoverlap.util import timing
from ccoverlap.util.errors import UsageError
from ccoverlap.util.inputs import open_regular
from ccoverlap.util.tracefiles import alone_trace

if TYPE_CHECKING:
    from ccoverlap.analysis.process import Process

FORMAT = "ccoverlap-doctor-steps/1"
STEPS_SUFFIX = "_steps.jsonl"
TRACE_SUFFIX = "_trace.json.gz"
#: the interposer's stats, one file per process (%p: its pid); not *.json, which `ccoverlap analyze` reads as traces
STATS_NAME = "interposer-%p.stats"


#: how launchers number a job's processes, the first found in a process's environment wins: (launcher, global
#: rank, world size, rank on its node, its node's index); torchrun's also under Horovod and DeepSpeed
LAUNCHERS = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID"),
    ("open mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", None),
)


@dataclass(frozen=True)
class Identity:
    """Which process of the job this is, and where it runs."""

    rank: int  # global
    world: int
    local_rank: int | None
    node: int | None  # the node's index in the job, where the launcher numbers nodes
    host: str
    source: str  # torch.distributed, or the launcher whose variables said so
    in_process: bool = False  # the group's store lives in this process: its other ranks are emulated here

    def header(self) -> dict:
        return {"world_size": self.world, "local_rank": self.local_rank, "node": self.node, "host": self.host,
                "rank_from": self.source, "in_process": self.in_process}


def _int(environ: Mapping[str, str], name: str | None) -> int | None:
    try:
        return int(environ[name]) if name and name in environ else None
    except ValueError:
        return None


def identity(environ: Mapping[str, str], dist: tuple[int, int] | None = None) -> Identity:
    """This process's place in the job: torch.distributed's rank and world (`dist`, once it is initialised), else
    the first launcher's variables that hold a rank and a world size; the rank on its node and the node's index
    from the same launcher where it gives them; else rank 0 of 1 (one process on its own)."""
    host = socket.gethostname()
    for name, rank_var, world_var, local_var, node_var in LAUNCHERS:
        rank, world = _int(environ, rank_var), _int(environ, world_var)
        if rank is not None and world is not None and 0 <= rank < world:
            break
    else:
        name, rank, world, local_var, node_var = "none", 0, 1, None, None
    local, node = _int(environ, local_var), _int(environ, node_var)
    if dist is None:
        return Identity(rank, world, local, node, host, name)
    if tuple(dist) != (rank, world):  # the program numbered its processes itself: the launcher's numbers are not its
        local = node = None
    return Identity(dist[0], dist[1], local, node, host, "torch.distributed")


def missing(records: list[RankRecord]) -> tuple[list[int], int]:
    """(the ranks of the job that left no record here, the job's world size as its records say). A record whose
    group lived in its own process (an emulated world) expects no other process."""
    world = max((r.header.get("world_size", 1) for r in records if not r.header.get("in_process")), default=0)
    return sorted(set(range(world)) - {r.rank for r in records}), world


def nodes(records: list[RankRecord]) -> dict[str, list[int]]:
    """The ranks recorded per node ('host' or 'host node N' where the launcher numbers nodes), in rank order."""
    out: dict[str, list[int]] = {}
    for r in sorted(records, key=lambda r: r.rank):
        out.setdefault(r.where, []).append(r.rank)
    return out


class Log:
    """The writer, in the program: opened once the process is one of the program's ranks (its first optimizer
    step, or the window of --seconds)."""

    def __init__(self, folder: Path, rank: int, header: dict):
        folder.mkdir(parents=True, exist_ok=True)
        for stem in (f"rank{rank}", f"rank{rank}_pid{os.getpid()}"):
            try:
                self._fd = os.open(folder / (stem + STEPS_SUFFIX), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND,
                                   0o644)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"{folder / (stem + STEPS_SUFFIX)} exists")
        self.trace = folder / (stem + TRACE_SUFFIX)
        self.alone = alone_trace(self.trace)
        self._size = 0
        try:
            self.write({"format": FORMAT, "rank": rank, "pid": os.getpid(), **header})
        except OSError:  # a full disk: no empty file left behind to be taken for a record
            os.close(self._fd)
            os.unlink(folder / (stem + STEPS_SUFFIX))
            raise

    def write(self, obj: dict) -> None:
        """One line, whole or not at all: a write the disk cuts short is taken back, and raises."""
        line = (json.dumps(obj) + "\n").encode()
        try:
            if os.write(self._fd, line) != len(line):
                os.write(self._fd, b"\n")  # no room for the rest: this raises the disk's error (ENOSPC, EFBIG)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            os.ftruncate(self._fd, self._size)
            raise
        self._size += len(line)


@dataclass(frozen=True)
class Step:
    step: int  # 1 = the first optimizer step
    ms: float | None  # host clock from the end of the previous step; None for the first (no start seen)
    gpu_ms: float | None  # between CUDA events at the same points; None without CUDA
    profiled: bool  # recorded in the trace
    warmup: bool  # the profiler was warming up (started in this step's optimizer step)
    alone: bool = False  # in the alone window (its warm-up included): every launch serialized
    after_window: bool = False  # the first step after a window: the trace's export left host and GPU cold (read)

    @property
    def outside(self) -> bool:
        """A step the profiler did not touch: the ones to compare with a run without the doctor."""
        return not (self.profiled or self.warmup or self.alone or self.after_window)


@dataclass(frozen=True)
class RankRecord:
    path: Path
    rank: int
    header: dict
    steps: tuple[Step, ...]
    cuda: bool | None  # CUDA in use when the window opened; None: no window
    trace: Path | None  # the trace written, if any
    recorded: int | None  # full steps in the trace; None while the window never closed (the process was killed)
    complete: bool  # the window closed after all its steps
    error: str | None  # why the profiler did not start
    fingerprint: tuple[float, ...] | None = None  # the tuner's: squared norms of the trained parameters at the end
    rounding: float | None = None  # the tuner's: the unit roundoff of the parameters' coarsest dtype
    stopped: int | None = None  # the tuner's: the step after which the capture ended the process
    alone_trace: Path | None = None  # the alone window's trace, if written
    alone_note: str | None = None  # why there is none (the interposer not loaded, the profiler failed), or None
    window_s: tuple[float | None, float | None] = (None, None)  # wall time of the window and of the alone window
    graphs: tuple[dict, ...] = ()  # the CUDA graphs captured before its window closed (doctor/graph_capture)
    graphs_skipped: tuple[str, ...] = ()  # why a captured graph was not read (a child graph, an old torch, ...)
    hold: dict | None = None  # the GPU held before each recorded step: {held, timed_out, timeout_ms} (doctor/hold.py)
    hold_note: str | None = None  # why it was not held though asked to (no driver, no stream memory operations)

    @property
    def steady(self) -> list[Step]:
        """The steps outside the windows, less the program's first timed one (its warm-up: allocator, libraries'
        heuristics) where two more remain: what the doctor takes for the program's own step. Measured on 24
        recorded captures against plain runs (bench/results/outside-steps-2026-12-06.json): 21 within 5% of
        the plain median, against 19 with the warm-up step and 18 with the step after the window too."""
        outside = [s for s in self.steps if s.outside]
        timed = [s for s in outside if s.ms is not None]
        return [s for s in outside if s is not timed[0]] if len(timed) >= 3 else outside

    @property
    def held(self) -> bool:
        """Most of its profiled steps began held and ended with their launches queued (not let go by the timer)."""
        return bool(self.hold) and self.hold["held"] > 2 * self.hold["timed_out"]

    @property
    def pid(self) -> int | None:
        return self.header.get("pid")

    @property
    def env(self) -> dict[str, str]:
        """The scheduling variables the process ran with (capture.KNOBS)."""
        return dict(self.header.get("env") or {})

    @property
    def where(self) -> str:
        """Its node: the host, and the node's index where the launcher gave one ('?' for records before hosts)."""
        host, node = self.header.get("host", "?"), self.header.get("node")
        return host if node is None else f"{host} node {node}"

    @property
    def window(self) -> str:
        if self.error is not None:
            return f"the profiler did not start ({self.error})"
        if self.cuda is None:
            return "not reached"
        if self.recorded is None:
            return "open when the process ended (no trace)"
        if "seconds" in self.header:
            return f"{self.header['seconds']:g} s" if self.complete else "cut short"
        if not self.complete:
            return f"cut short after {self.recorded} step(s)"
        profiled = [s.step for s in self.steps if s.profiled]
        return f"steps {profiled[0]}-{profiled[-1]}" if profiled else "complete"

    def summary(self) -> dict:
        """Step times (ms) of the steps outside the profiler's window, and of the profiled ones."""
        def stats(values: list[float]) -> dict | None:
            return {"n": len(values)} | timing.summary(values) if values else None

        outside = self.steady
        profiled = [s for s in self.steps if s.profiled]
        return {
            "rank": self.rank, "host": self.header.get("host"), "node": self.header.get("node"),
            "local_rank": self.header.get("local_rank"), "file": str(self.path), "steps": len(self.steps),
            "window": self.window,
            "trace": str(self.trace) if self.trace else None, "cuda": self.cuda,
            "outside_ms": stats([s.ms for s in outside if s.ms is not None]),
            "outside_gpu_ms": stats([s.gpu_ms for s in outside if s.gpu_ms is not None]),
            "profiled_ms": stats([s.ms for s in profiled if s.ms is not None]),
            "profiled_gpu_ms": stats([s.gpu_ms for s in profiled if s.gpu_ms is not None]),
            "profiled_steps": [s.step for s in profiled],
            "alone_ms": stats([s.ms for s in self.steps if s.alone and s.ms is not None]),
            "alone_trace": str(self.alone_trace) if self.alone_trace else None, "alone_note": self.alone_note,
            "window_s": self.window_s[0], "alone_window_s": self.window_s[1],
            "hold": self.hold, "hold_note": self.hold_note,
        }


def read(path: Path) -> RankRecord:
    """One rank's record; UsageError (truncated, or not a doctor's file) naming the line.

    A last line without its newline is a write the process did not finish (it was killed): left out."""
    try:
        with open_regular(path, "a ccoverlap doctor step record") as f:  # a FIFO named like one: no wait
            text = f.read().decode()
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    lines = text.split("\n")[:-1]  # what follows the last newline was never finished
    events = []
    for n, line in enumerate(lines, 1):
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict) or (n == 1 and event.get("format") != FORMAT):
            raise UsageError(f"{path}: line {n}: not a ccoverlap doctor step record ({FORMAT})")
        events.append(event)
    if not events:
        raise UsageError(f"{path}: empty (not a ccoverlap doctor step record)")
    header, rest = events[0], events[1:]
    try:
        steps = _after_windows(sorted((Step(e["step"], e["ms"], e["gpu_ms"], e["profiled"], e["warmup"],
                                            bool(e.get("alone"))) for e in rest if "step" in e), key=lambda s: s.step))
        opened = next((e for e in rest if e.get("window") == "open"), None)
        closed = next((e for e in rest if e.get("window") == "closed"), None)
        failed = next((e for e in rest if e.get("window") == "failed"), None)
        trace = closed["trace"] if closed else None
        printed = next((e for e in rest if "fingerprint" in e), {})
        stopped = next((e["stopped"] for e in rest if "stopped" in e), None)
        alone = {e["alone_window"]: e for e in rest if "alone_window" in e}
        alone_trace = (alone.get("closed") or {}).get("trace")
        note = alone["unavailable"]["why"] if "unavailable" in alone else None
        graphs = tuple(g for e in rest if isinstance(e.get("graphs"), list) for g in e["graphs"])
        skipped = tuple(str(w) for e in rest if isinstance(e.get("graphs_skipped"), list) for w in e["graphs_skipped"])
        held = closed.get("hold") if closed and isinstance(closed.get("hold"), dict) else None
        not_held = next((str(e.get("why")) for e in rest if e.get("hold") == "unavailable"), None)
        return RankRecord(path, header["rank"], header, steps, opened["cuda"] if opened else None,
                          path.parent / trace if trace else None, closed["recorded"] if closed else None,
                          bool(closed and closed["complete"]), failed["error"] if failed else None,
                          tuple(map(float, printed["fingerprint"])) if printed else None,
                          _number(printed.get("rounding")), stopped,
                          path.parent / alone_trace if alone_trace else None, note,
                          (_elapsed(opened, closed), _elapsed(alone.get("open"), alone.get("closed"))), graphs,
                          skipped, held, not_held)
    except (KeyError, TypeError) as exc:
        raise UsageError(f"{path}: a line without {exc} (not a ccoverlap doctor step record)") from None


def _after_windows(steps: list[Step]) -> tuple[Step, ...]:
    """The steps, the first one after a window (profiled or alone) marked `after_window`."""
    return tuple(dataclasses.replace(s, after_window=True) if i and (steps[i - 1].profiled or steps[i - 1].alone)
                 and not (s.profiled or s.warmup or s.alone) else s for i, s in enumerate(steps))


def _number(value) -> float | None:
    """A number a record line carries, or None where it carries none (an older record)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _elapsed(opened: dict | None, closed: dict | None) -> float | None:
    """Seconds from a window's opening to its closing (its export included), where both lines carry a time."""
    if opened and closed and "t" in opened and "t" in closed:
        return closed["t"] - opened["t"]
    return None


def read_all(folder: Path) -> tuple[list[RankRecord], list[UsageError]]:
    """Every record in `folder` by rank, and the files that are not records (one error each)."""
    records, bad = [], []
    for path in sorted(folder.glob("*" + STEPS_SUFFIX)):
        try:
            records.append(read(path))
        except UsageError as exc:
            bad.append(exc)
    return sorted(records, key=lambda r: (r.rank, r.path.name)), bad


def processes(folder: Path, records: list[RankRecord]) -> dict[int, Process]:
    """Rank -> its process (the first record of a rank: the one whose trace the analysis reads)."""
    if not records:  # a folder of traces alone (`analyze` on any folder asks): nothing more to import
        return {}
    # on use, not at the top: the capture imports this module inside the user's program, which needs neither the
    # interposer's module nor the analysis (msgspec, orjson)
    from ccoverlap.analysis.process import Process
    from ccoverlap.control.interposer import LaunchStats

    out: dict[int, Process] = {}
    for r in records:
        if r.rank not in out and r.pid is not None:
            t = r.summary()
            # the GPU's step period where both sides have it: a host that runs ahead of the GPU (no sync in its
            # step) times its enqueueing, not the step
            pair = ("outside_gpu_ms", "profiled_gpu_ms") if t["outside_gpu_ms"] and t["profiled_gpu_ms"] else \
                ("outside_ms", "profiled_ms")
            out[r.rank] = Process(LaunchStats.read([folder / STATS_NAME.replace("%p", str(r.pid))]), r.env,
                                  r.alone_trace, r.graphs, r.graphs_skipped,
                                  tuple((t[k] or {}).get("median") for k in pair), r.held)
    return out


def folder_processes(folder: Path) -> tuple[dict | None, list[str]]:
    """The processes of a `ccoverlap doctor` folder (its records read), for `analyze` and `whatif` on it to see
    what the doctor saw (launch stats, the captured graphs, the step times), and one line per file named like a
    record that could not be read (a FIFO, a foreign file): left out, said. None for any other path (a trace
    file, a folder of strategies: the analysis then goes by the traces alone)."""
    if not folder.is_dir():
        return None, []
    records, bad = read_all(folder)
    return processes(folder, records) or None, [f"{e}: left out (what it records is unknown)" for e in bad]
