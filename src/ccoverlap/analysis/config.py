"""What `ccoverlap analyze` reads: a field with help is a CLI option (util/options.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ccoverlap.util.errors import UsageError


def _mb(value: float) -> float:
    if not (math.isfinite(value) and 0 <= value <= 1e9):
        raise UsageError(f"--max-trace-mb {value:g}: valid 0 (a quarter of the memory available per worker) or a "
                         "positive number of MB, up to 1e9")
    return value


@dataclass(frozen=True)
class AnalyzeConfig:
    max_trace_mb: float = field(default=0.0, metadata={
        "metavar": "MB", "parse": _mb, "shown": "a quarter of the memory available per worker",
        "help": "the largest trace read, decompressed, in MB: a trace past it is left out, named (a .gz is "
        "inflated in chunks and stopped there)"})
