"""What `ccoverlap doctor` captures and writes (DoctorConfig), and what the capture inside the program reads
(CaptureConfig, which the tuner's trials build too): validated before the program starts, importable without torch."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ccoverlap.model import comm
from ccoverlap.util.errors import UsageError, check_range

@dataclass(frozen=True, kw_only=True)
class CaptureConfig:
    """What the capture inside every process of the program reads (doctor/capture.py), given to it as the start-up
    hook's JSON (`job`): the window (DoctorConfig's options of the same names), and the tuner's switches."""

    steps: int
    skip: int
    seconds: float
    skip_seconds: float
    out: str
    alone: str
    hold: str = "off"
    # the tuner's trials (tune/trial.py): time steps without the profiler, end the program once steps
    # skip+1..skip+steps are timed, and write a fingerprint of the trained parameters then
    profile: bool = True
    stop: bool = False
    fingerprint: bool = False

    def job(self) -> dict:
        """The start-up hook's JSON (control/startup.DOCTOR_ENV)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class DoctorConfig:
    """The defaults are the CLI's; every field is an option (util/options.py)."""

    steps: int = field(default=6, metadata={
        "metavar": "N", "help": "optimizer steps to profile (the analysis reads all but the last, which the profiler "
        "cuts short; the headline reads the typical ones: 6 leaves 3 where the first two are atypical)"})
    skip: int = field(default=5, metadata={
        "metavar": "K", "help": "optimizer steps to run first, unprofiled; the profiler warms up in the last one's "
        "optimizer step"})
    seconds: float = field(default=0.0, metadata={
        "metavar": "S", "help": "profile this many seconds of wall clock instead of steps, for a program that never "
        "steps a torch.optim optimizer (0: steps)"})
    skip_seconds: float = field(default=0.0, metadata={
        "metavar": "T", "help": "with --seconds: seconds from the program's `import torch` to the window"})
    out: str | None = field(default=None, metadata={
        "metavar": "DIR", "help": "folder for rank<r>_trace.json.gz and rank<r>_steps.jsonl, new or empty",
        "shown": "./ccoverlap-doctor-<date>-<time>"})
    json: str | None = field(default=None, metadata={
        "metavar": "PATH", "help": "write the analysis, the step times and what was captured as JSON"})
    report: str | None = field(default=None, metadata={
        "metavar": "PATH", "help": "write the HTML report (a timeline per rank; its PNGs in <name>_files/ beside it)"})
    perfetto: str | None = field(default=None, metadata={
        "metavar": "PATH", "help": "write the annotated trace: every rank's captured trace plus lanes of the findings "
        "(exposed communication, each collective's SM wait with its cause and blocker, the lever recommended), for "
        "ui.perfetto.dev or chrome://tracing"})
    comm_regex: str | None = field(default=None, metadata={
        "metavar": "RE", "help": "also count kernels whose name matches RE (POSIX extended) as communication, "
        "besides NCCL's and RCCL's"})
    alone: str = field(default="on", metadata={
        "metavar": "on|off", "help": "after the window, record its steps again with every kernel "
        "launched alone (the launch interposer, preloaded: each launch starts on an idle device), so each launch's "
        "time alone is measured; off: slowdown beside the other side is unknown"})
    hold: str = field(default="off", metadata={
        "metavar": "on|off", "help": "on: hold the GPU before each profiled step until the step's optimizer step has "
        "ended (its stream waits on a flag from the step's first kernel launch: no kernel), so the step's launches "
        "queue ahead of the GPU as they do where the host outruns it unprofiled; a host that waits for the GPU "
        "inside the step is let go after 4 times its longest step. off: the steps as the profiler paces them"})

    def validate(self) -> DoctorConfig:
        check_range("--steps", self.steps, 1, 1000)
        check_range("--skip", self.skip, 1, 10**9)
        for flag, value in (("--seconds", self.seconds), ("--skip-seconds", self.skip_seconds)):
            if not 0 <= value <= 86400:
                raise UsageError(f"{flag}={value:g} is out of range: valid 0..86400 seconds")
        for flag, value in (("--alone", self.alone), ("--hold", self.hold)):
            if value not in ("on", "off"):
                raise UsageError(f"{flag} {value}: valid on, off")
        if self.skip_seconds and not self.seconds:
            raise UsageError("--skip-seconds goes with --seconds: give the window's length too")
        comm.check(self.comm_regex)
        return self

    def capture(self) -> CaptureConfig:
        """What the capture in every process of the program reads."""
        return CaptureConfig(steps=self.steps, skip=self.skip, seconds=self.seconds, skip_seconds=self.skip_seconds,
                             out=self.out, alone=self.alone, hold=self.hold)
