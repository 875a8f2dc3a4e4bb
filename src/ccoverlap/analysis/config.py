"""What `ccoverlap analyze` reads: a field with help is a CLI option (util/options.py)."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from ccoverlap.model import comm
from ccoverlap.util.errors import UsageError
from ccoverlap.util.options import path_arg

CORES = os.cpu_count() or 1


def _mb(value: float) -> float:
    if not (math.isfinite(value) and 0 <= value <= 1e9):
        raise UsageError(f"--max-trace-mb {value:g}: valid 0 (a quarter of the memory available per worker) or a "
                         "positive number of MB, up to 1e9")
    return value


@dataclass(frozen=True)
class AnalyzeConfig:
    baseline: Path | None = field(default=None, metadata={
        "type": path_arg, "metavar": "DIR", "help": "traces of the reference run (for slowdowns and padding)"})
    report: Path | None = field(default=None, metadata={
        "type": path_arg, "metavar": "PATH",
        "help": "write a self-contained HTML report (its PNGs also in <name>_files/ beside it)"})
    perfetto: Path | None = field(default=None, metadata={
        "type": path_arg, "metavar": "PATH", "help": "write the annotated trace: every rank's captured trace plus "
        "lanes of the findings (exposed communication, each collective's SM wait with its cause and blocker, the lever "
        "recommended), for ui.perfetto.dev or chrome://tracing"})
    comm_regex: str | None = field(default=None, metadata={
        "metavar": "RE", "help": "also count kernels whose name matches RE (POSIX extended) as communication, besides "
        "NCCL's and RCCL's"})
    json: str | None = field(default=None, metadata={
        "metavar": "PATH", "help": "write the analysis as JSON to PATH (-: standard output, and nothing else there)"})
    rows: bool = field(default=False, metadata={
        "help": "with --json: also each collective kernel's row (its wait, cause, slowdown) and each step's, per rank; "
        "counted only without it (they are most of the JSON of a long trace)"})
    jobs: int | None = field(default=None, metadata={
        "metavar": "N", "type": int, "shown": "the cores", "help": "worker processes reading and analysing the "
        "ranks; --baseline and --report run in one process: both need every rank's trace model"})
    max_trace_mb: float = field(default=0.0, metadata={
        "metavar": "MB", "parse": _mb, "shown": "a quarter of the memory available per worker",
        "help": "the largest trace read, decompressed, in MB: a trace past it is left out, named (a .gz is "
        "inflated in chunks and stopped there)"})

    def validate(self) -> AnalyzeConfig:
        """Checked before any trace is read."""
        comm.check(self.comm_regex)
        if self.jobs is not None and self.jobs < 1:
            raise UsageError(f"--jobs {self.jobs}: valid 1 or more")
        return self

    @property
    def workers(self) -> int:
        """--jobs, or this machine's cores (the default: not written into the flags, which are the same anywhere)."""
        return self.jobs or CORES
