"""The doctor's run after the capture: what was captured, the step times, the analysis and its verdict, the
files asked for. `ccoverlap doctor` starts the command (control/launch.py) and hands its folder here."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ccoverlap.control import startup
from ccoverlap.control.launch import end_as, found, wait
from ccoverlap.control.procs import ending
from ccoverlap.doctor import record
from ccoverlap.doctor.analysis.summary import document, print_ranks, write_html
from ccoverlap.doctor.config import DoctorConfig
from ccoverlap.util.errors import UsageError
from ccoverlap.util.output import print_table, write_json


def run(cfg: DoctorConfig, cmd: list[str]) -> int:
    """Run `cmd` with the capture injected, then say what it captured; the exit code is the command's, or 2 where
    it succeeded but nothing was profiled or the analysis failed."""
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
    if line := unreached(records, out):
        failures.append(line)
    on_cpu = {r.trace.name for r in records if r.trace and r.cuda is False}
    traces = sorted(p for p in out.glob("*" + record.TRACE_SUFFIX) if p.name not in on_cpu)
    print(_captured(out, records, len(on_cpu) + len(traces), code))
    timed = any(r.steps for r in records)
    if timed:
        print_table("step times per rank, ms (host clock, steps the profiler did not touch)",
                    ["rank", "node", "steps", "window", "median", "min", "max", "GPU median", "profiled median"],
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
        from ccoverlap.gpu import provenance

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
    where = record.nodes(records)
    across = f" on {len(where)} nodes ({'; '.join(f'{n}: {_ranks(rs)}' for n, rs in where.items())})" if len(where) > 1 else ""
    return f"ccoverlap doctor: {ended}captured {traces} trace(s) and the step times of rank(s) {ranks}{across} in {out}"


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))}"


def unreached(records: list[record.RankRecord], out: Path) -> str | None:
    """The line naming the ranks of the job that left nothing in `out` (None: every rank did): on a job across
    nodes, the ranks of a node that does not share `out` write theirs on that node."""
    lost, world = record.missing(records)
    if not lost:
        return None
    hosts = ", ".join(sorted({r.header.get("host", "?") for r in records}))
    return (f"{_ranks(lost)} of {world} left no step record in {out} (records came from {hosts}): a rank "
            "that stepped no optimizer writes none, and on a job across nodes every node must see --out at the "
            "same path, on a shared file system (docs/doctor.md, 'Across nodes')")


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
    return [r.rank, r.where, s["steps"], s["window"], _ms(s["outside_ms"]), _ms(s["outside_ms"], "min"),
            _ms(s["outside_ms"], "max"), _ms(s["outside_gpu_ms"]), _ms(s["profiled_ms"])]


def _analyze(out: Path, traces: list[Path], comm_regex: str | None):
    """The analysis of `out`, and one line for each trace it could not use (its other notes go to stderr)."""
    from ccoverlap.doctor.analysis import analyze

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
