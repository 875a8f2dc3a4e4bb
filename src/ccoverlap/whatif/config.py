"""What `ccoverlap whatif` predicts: validated before any capture is read (a field with help is a CLI option)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ccoverlap.control import levers
from ccoverlap.model.limits import PRESET_NAMES
from ccoverlap.util.errors import UsageError, check_range


def _strategies(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(levers.strategy(v).name for v in values)  # a UsageError names a bad lever or value


@dataclass(frozen=True)
class WhatIfConfig:
    levers: tuple[str, ...] = field(default=(), metadata={
        "flag": "--lever", "metavar": "L", "append": True, "parse": _strategies, "shown": "every registry strategy",
        "help": "a strategy to predict (lever[=value]+lever..., as `ccoverlap levers` lists; repeatable)"})
    device: str = field(default="", metadata={
        "metavar": "D", "shown": "the captured GPU", "help": f"predict on this GPU preset ({', '.join(PRESET_NAMES)})"})
    busbw: float = field(default=0.0, metadata={
        "metavar": "GBS", "shown": "as captured", "help": "predict collectives at this bus bandwidth, GB/s "
        "(needs --capture-busbw)"})
    world: int = field(default=0, metadata={
        "metavar": "N", "shown": "as captured", "help": "predict collectives at this many ranks (needs --capture-world "
        "where the trace does not say)"})
    capture_busbw: float = field(default=0.0, metadata={
        "metavar": "GBS", "shown": "unknown", "help": "the bus bandwidth the capture ran at, GB/s"})
    capture_world: int = field(default=0, metadata={
        "metavar": "N", "shown": "the trace's world size", "help": "the ranks the capture ran with"})
    comm_regex: str | None = field(default=None, metadata={
        "metavar": "REGEX", "help": "also communication: kernels matching this POSIX extended regex"})
    comm_cluster: int = field(default=0, metadata={
        "metavar": "N", "shown": "NCCL's default, 4 on sm_90",
        "help": "the communication kernels' cluster size (traces do not record it)"})
    unvalidated: bool = field(default=False, metadata={
        "help": "print the predictions even where the simulated default does not reproduce the capture, labelled "
        "unvalidated (default: such a capture is refused, no lever predicted)"})
    json: str | None = field(default=None, metadata={
        "metavar": "PATH", "help": "also write the predictions as JSON to PATH ('-': print JSON instead of the table)"})
    plot: str | None = field(default=None, metadata={"metavar": "PNG", "help": "also draw the predictions to PNG"})

    def validate(self) -> WhatIfConfig:
        if self.device and self.device.lower() not in PRESET_NAMES:
            raise UsageError(f"--device {self.device}: valid {', '.join(PRESET_NAMES)}")
        for flag, value in (("--busbw", self.busbw), ("--capture-busbw", self.capture_busbw)):
            if not 0 <= value <= 100000:
                raise UsageError(f"{flag}={value:g} is out of range: valid 0 (as captured) or 0.001..100000 GB/s")
        check_range("--world", self.world, 0, 1 << 20)
        check_range("--capture-world", self.capture_world, 0, 1 << 20)
        check_range("--comm-cluster", self.comm_cluster, 0, 16)
        if self.busbw and not self.capture_busbw:
            raise UsageError("--busbw needs --capture-busbw: the bus bandwidth the capture ran at is not in a trace")
        if self.world == 1:
            raise UsageError("--world 1: a collective of one rank moves nothing; valid 2..1048576")
        return self
