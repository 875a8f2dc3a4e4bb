"""`ccoverlap doctor`: profile an unmodified program, then say why its communication is exposed."""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from dataclasses import replace
from pathlib import Path

from ccoverlap import startup
from ccoverlap.doctor import record
from ccoverlap.doctor.config import DoctorConfig
from ccoverlap.errors import UsageError
from ccoverlap.procs import ending

from ._config import GIVEN, add_command, from_args
from ._output import check_new_folder, check_writable, print_table, write_json
from .analyze import document, print_ranks, write_html
from .run import command, end_as, found, wait

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
  ccoverlap doctor --seconds 5 --skip-seconds 30 --json doctor.json -- python serve.py
"""


def register(sub) -> None:
    add_command(
        sub, "doctor", DoctorConfig, run,
        help="profile an unmodified program (any number of ranks) and analyse its overlap",
        description="Run CMD with the profiler injected at start-up, record a few of its steps on every rank, "
        "then analyse the traces: per rank the step times, the overlap of communication with compute, the "
        "exposed communication and what to do about it. CMD's exit code and signals are passed through.",
        epilog=EPILOG, what="the command to run",
    )


def _config(args: argparse.Namespace) -> DoctorConfig:
    cfg = from_args(DoctorConfig, args).validate()
    if cfg.seconds and {"steps", "skip"} & getattr(args, GIVEN, set()):
        raise UsageError("--seconds profiles a time window; --steps and --skip count optimizer steps: give one or the other")
    out = check_new_folder(cfg.out or f"ccoverlap-doctor-{dt.datetime.now():%Y%m%d-%H%M%S}", "--out")
    for flag, path in (("--json", cfg.json), ("--report", cfg.report)):
        if path is not None:
            check_writable(path, flag)
    return replace(cfg, out=str(out))


def run(args: argparse.Namespace) -> int:
    cfg = _config(args)  # everything checked before the program starts
    cmd = command(args.argv, "ccoverlap doctor --steps 3 -- python train.py")
    env = dict(os.environ) | startup.hook_environ(startup.DOCTOR_ENV, cfg.capture(), os.environ)
    found(cmd, env, " (nothing was captured)")
    out = Path(cfg.out)
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    code = wait(cmd, env)
    try:
        failures = diagnose(out, cfg, cmd, code)
    except (UsageError, OSError) as exc:  # the program's exit code stands, whatever the doctor met
        failures = [str(exc)]
    if made and not any(out.iterdir()):
        out.rmdir()
    if code != 0:
        return end_as(code)
    for failure in failures:
        print(f"ccoverlap doctor: error: {failure}", file=sys.stderr)
    return 2 if failures else 0


def diagnose(out: Path, cfg: DoctorConfig, cmd: list[str], code: int) -> list[str]:
    """Say what was captured in `out`, the step times and the analysis; write --json and --report.
    Returns what failed (one line each): nothing profiled, a file that could not be read, a report not written."""
    records, bad = record.read_all(out)
    failures = [str(e) for e in bad]
    on_cpu = {r.trace.name for r in records if r.trace and r.cuda is False}
    traces = sorted(p for p in out.glob("*" + record.TRACE_SUFFIX) if p.name not in on_cpu)
    print(_captured(out, records, len(on_cpu) + len(traces), code))
    timed = any(r.steps for r in records)
    if timed:
        print_table("step times per rank, ms (host clock, steps the profiler did not touch)",
                    ["rank", "steps", "window", "median", "min", "max", "GPU median", "profiled median"],
                    [_row(r) for r in records])
    if not on_cpu and not traces and not bad:
        failures.append(_nothing(records, cfg))
    result, written = None, []
    if traces:
        result, unusable = _analyze(out, traces, cfg.comm_regex)
        failures += unusable
    elif on_cpu:
        print("no overlap analysis: the program ran on the CPU (no GPU kernels in its traces)"
              + ("; step times above" if timed else ""))
    if result is not None and result.ranks:
        written = _show(result, cfg.report)
    elif cfg.report:
        print(f"no report written to {cfg.report}: no GPU kernels were analysed")
    if cfg.json:
        from ccoverlap import provenance

        write_json(cfg.json, {
            "provenance": provenance.collect(), "command": cmd, "exit_code": code, "out": str(out),
            "step_times": [r.summary() for r in records],
            "analysis": document(result, None, written) if result is not None else None,
            "failures": failures,
        })
        print(f"json: {cfg.json}")
    return failures


def _show(result, report: str | None) -> list[Path]:
    """The analysis on the terminal (and the verdict per rank, where the analysis gives one), and the report."""
    print_ranks(result, "overlap in the profiled steps, ms per rank (all but the last step, as HTA)")
    for r in result.ranks:
        if line := r.to_dict().get("verdict"):
            print(f"verdict rank {r.rank}: {line}")
    if not report:
        return []
    written = write_html(result, Path(report))
    print(f"report: {written[0]}")
    return written


def _captured(out: Path, records: list[record.RankRecord], traces: int, code: int) -> str:
    ended = "" if code == 0 else f"the command ended with {ending(code)}; "
    if not records and not traces:
        return f"ccoverlap doctor: {ended}captured nothing in {out}"
    ranks = ", ".join(str(r.rank) for r in records) or "-"
    return f"ccoverlap doctor: {ended}captured {traces} trace(s) and the step times of rank(s) {ranks} in {out}"


def _nothing(records: list[record.RankRecord], cfg: DoctorConfig) -> str:
    """Why no trace was written, in one line."""
    if cfg.seconds:
        return (f"nothing was profiled: no Python process of the command was still running {cfg.skip_seconds:g} s "
                "after it imported torch with CUDA or torch.distributed initialised (or an optimizer stepped)")
    if not records:
        return ("nothing was profiled: no Python process of the command stepped a torch.optim optimizer "
                "(for a program without one, give --seconds)")
    if failed := [r for r in records if r.error]:
        return f"nothing was profiled: rank {failed[0].rank}: {failed[0].window}"
    most = max(len(r.steps) for r in records)
    if most < cfg.skip:
        return (f"nothing was profiled: the program made {most} optimizer step(s); the window opens after step "
                f"{cfg.skip} (lower --skip)")
    return "nothing was profiled: the window opened but no process lived to write its trace"


def _ms(stats: dict | None, key: str = "median") -> str:
    return "-" if stats is None else f"{stats[key]:.3f}"


def _row(r: record.RankRecord) -> list:
    s = r.summary()
    return [r.rank, s["steps"], s["window"], _ms(s["outside_ms"]), _ms(s["outside_ms"], "min"),
            _ms(s["outside_ms"], "max"), _ms(s["outside_gpu_ms"]), _ms(s["profiled_ms"])]


def _analyze(out: Path, traces: list[Path], comm_regex: str | None):
    """The analysis of `out`, and one line for each trace it could not use (its other notes go to stderr)."""
    from ccoverlap.analysis import analyze

    try:
        result = analyze(out, None, comm_regex)
    except UsageError as exc:
        return None, [str(exc)]
    used = {t.path.name for ranks in result.strategies.values() for t in ranks.values()}
    unusable = {p.name for p in traces} - used
    failures: dict[str, str] = {}  # one line a file: why it was skipped
    for problem in result.problems:
        name = problem.path.name
        if name not in unusable:
            print(f"ccoverlap doctor: {problem}", file=sys.stderr)
        elif name not in failures or problem.message.startswith("skipped"):
            failures[name] = str(problem)
    return result, [failures.get(name, f"{out / name}: not analysed") for name in sorted(unusable)]
