"""The name of a trace's alone window, which the doctor's capture writes and the analysis reads beside the trace:
one place, so that neither imports the other (the capture runs inside the user's program, the analysis does not)."""
from __future__ import annotations

from pathlib import Path

#: the alone window's trace: beside the window's, named so that no reader takes it for a trace of its own
ALONE_SUFFIX = ".alone.gz"


def alone_trace(trace: Path) -> Path:
    """The alone window of a trace file: rank0_trace.json.gz -> rank0_trace.alone.gz (also for foreign names)."""
    stem = trace.name.removesuffix(".gz").removesuffix(".json")
    return trace.with_name(stem + ALONE_SUFFIX)
