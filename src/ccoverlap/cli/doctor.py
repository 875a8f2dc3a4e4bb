"""`ccoverlap doctor`: profile an unmodified program, then say why its communication is exposed."""
from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import replace

from ccoverlap.control.launch import command
from ccoverlap.doctor import session
from ccoverlap.doctor.config import DoctorConfig
from ccoverlap.util.errors import UsageError
from ccoverlap.analysis.summary import report_folder
from ccoverlap.util.options import GIVEN, Outputs, add_command, add_options, from_args
from ccoverlap.util.output import check_new_folder, check_outputs

EPILOG = """\
The profiler is injected at interpreter start-up, in every Python process of CMD (a
sitecustomize hook first on PYTHONPATH, as `ccoverlap run --strategy` does; a
sitecustomize of your own still runs after it), so `python train.py` and torchrun
with any number of ranks are profiled with no change to their code. A step is an
optimizer step (torch's global optimizer-step hook): steps 1..K run unprofiled, the
profiler warms up in step K's optimizer step and records steps K+1..K+N. Every
step's time is kept. --seconds profiles a wall-clock window instead, for a program
without a torch.optim optimizer.

DIR gets rank<r>_trace.json.gz (`ccoverlap analyze DIR` reads them again) and
rank<r>_steps.jsonl (step times). The exit code is CMD's (the doctor dies of the
signal CMD died of), or 2 where CMD succeeded but nothing was profiled or the
analysis failed. See docs/doctor.md.

examples:
  ccoverlap doctor -- python train.py
  ccoverlap doctor --skip 10 --report doctor.html -- torchrun --nproc-per-node 8 train.py
  ccoverlap doctor --perfetto doctor-trace.json -- torchrun --nproc-per-node 2 train.py
  ccoverlap doctor --seconds 5 --skip-seconds 30 --json doctor.json -- python serve.py
"""


def register(sub) -> None:
    add_options(add_command(
        sub, "doctor", DoctorConfig, run,
        help="profile an unmodified program (any number of ranks) and analyse its overlap",
        description="Run CMD with the profiler injected at start-up, record a few of its steps on every rank, "
        "then analyse the traces: per rank the step times, the overlap of communication with compute, the "
        "exposed communication and what to do about it. CMD's exit code and signals are passed through.",
        epilog=EPILOG, what="the command to run",
    ), Outputs)


def _config(args: argparse.Namespace) -> DoctorConfig:
    cfg = from_args(DoctorConfig, args).validate()
    if cfg.seconds and {"steps", "skip"} & getattr(args, GIVEN, set()):
        raise UsageError("--seconds profiles a time window; --steps and --skip count optimizer steps: "
                         "give one or the other")
    out = check_new_folder(cfg.out if cfg.out is not None else f"ccoverlap-doctor-{dt.datetime.now():%Y%m%d-%H%M%S}",
                           "--out")
    check_outputs({"--json": cfg.json, "--report": cfg.report, "--perfetto": cfg.perfetto}, report_folder(cfg.report),
                  force=args.force)
    return replace(cfg, out=str(out))


def run(args: argparse.Namespace) -> int:
    cfg = _config(args)  # everything checked before the program starts
    return session.run(cfg, command(args.argv, "ccoverlap doctor --steps 3 -- python train.py"))
