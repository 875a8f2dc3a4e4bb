"""What `ccoverlap occupancy`, `plan` and `info` compute (a field with help is a CLI option:
util/options.py), checked before any GPU work."""
from __future__ import annotations

from dataclasses import dataclass, field

from ccoverlap.model.limits import DeviceLimits, device_help
from ccoverlap.util.errors import UsageError, check_range
from ccoverlap.util.options import JSON_HELP

#: --device of occupancy and plan (help, then the default as --help shows it)
DEVICE = {"help": device_help("cuda[:N]"), "shown": "live GPU"}


@dataclass(frozen=True)
class OccupancyConfig:
    device: str = field(default="cuda", metadata=DEVICE)
    threads: int | None = field(default=None, metadata={"type": int, "help": "threads per block (1..1024)"})
    regs: int | None = field(default=None, metadata={"type": int, "help": "registers per thread (1..255 on NVIDIA)"})
    static_smem: int = field(default=0, metadata={"help": "static shared memory per block, bytes"})
    dynamic_smem: int = field(default=0, metadata={"help": "dynamic shared memory per block, bytes"})
    json: str | None = field(default=None, metadata={"metavar": "PATH", "help": JSON_HELP})

    def validate(self) -> OccupancyConfig:
        """The footprint is complete (without --validate or --validate-carveout, which need none)."""
        if self.threads is None or self.regs is None:
            raise UsageError("--threads and --regs are required (or --validate KERNELS on a live GPU)")
        return self


@dataclass(frozen=True)
class OccupancyValidation:
    """`ccoverlap occupancy`'s checks of the model on a live GPU (lab/validate.py, lab/carveout_sweep.py)."""

    kernels: int | None = field(default=None, metadata={
        "flag": "--validate", "type": int, "metavar": "KERNELS",
        "help": "compile KERNELS kernels and compare the model with CUDA's occupancy API"})
    shapes: int = field(default=16, metadata={"help": "launch shapes per kernel with --validate"})
    seed: int = field(default=0, metadata={"help": "random seed for --validate and --validate-carveout"})
    out: str | None = field(default=None, metadata={
        "help": "write the --validate or --validate-carveout table (JSON with provenance) here"})
    validate_carveout: bool = field(default=False, metadata={
        "help": "measure when a kernel starts on SMs that another holds (shared-memory carveout) and compare with "
        "the model"})
    quick: bool = field(default=False, metadata={"help": "with --validate-carveout: 14 cases, a smoke test"})
    reps: int = field(default=3, metadata={"help": "repetitions per case with --validate-carveout"})

    def validate(self) -> OccupancyValidation:
        """The ranges of the check that runs: --validate-carveout's, else --validate's."""
        if self.validate_carveout:
            check_range("--reps", self.reps, 1, 100)
        elif self.kernels is not None:
            check_range("--validate", self.kernels, 1, 10000)
            check_range("--shapes", self.shapes, 1, 10000)
        return self



@dataclass(frozen=True)
class PlanConfig:
    device: str = field(default="cuda", metadata=DEVICE)
    compute: str | None = field(default=None, metadata={
        "metavar": "SPEC", "required": True, "help": "compute kernel footprint, e.g. threads=256,regs=32"})
    comm: str = field(default="nccl", metadata={
        "metavar": "SPEC", "help": "communication footprint spec, or nccl[:overrides]"})
    per_sm: int = field(default=1, metadata={"help": "communication CTAs to fit beside compute on each SM"})
    drain: str = field(default="0", metadata={
        "metavar": "N|auto", "help": "compute blocks per SM that may retire before the comm CTAs fit (0: resident "
        "at once; auto: 1 when the padded compute grid spans >= 2 waves, which needs ctas= in --compute)"})
    json: str | None = field(default=None, metadata={"metavar": "PATH", "help": JSON_HELP})

    def validate(self, dev: DeviceLimits) -> PlanConfig:
        """--per-sm and --drain against `dev`'s blocks per SM."""
        check_range("--per-sm", self.per_sm, 1, dev.max_blocks_per_sm)
        if self.drain.isdigit():
            check_range("--drain", int(self.drain), 0, dev.max_blocks_per_sm)
        elif self.drain != "auto":
            raise UsageError(f"--drain {self.drain!r}: valid 0..{dev.max_blocks_per_sm} or auto")
        return self

    @property
    def drain_blocks(self) -> int | None:
        """--drain for the planner: None for auto."""
        return None if self.drain == "auto" else int(self.drain)


@dataclass(frozen=True)
class InfoConfig:
    device: str | None = field(default=None, metadata={"help": device_help("cuda / cuda:N for a live GPU")})
    nccl: bool = field(default=False, metadata={
        "help": "also show the installed NCCL's collective-kernel footprint (runs cuobjdump)"})
    json: str | None = field(default=None, metadata={"metavar": "PATH", "help": JSON_HELP})
