"""The doctor's run: the command started with the capture (control/launch.py), then what was captured, the step
times, the analysis and its verdict, and the files asked for. `ccoverlap doctor` checks its options and hands
the command here."""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ccoverlap.control import levers, startup
from ccoverlap.control.interposer import built
from ccoverlap.control.launch import Launch, found
from ccoverlap.control.procs import end_as, ending
from ccoverlap.doctor import record
from ccoverlap.analysis import cpu
from ccoverlap.analysis.summary import document, print_ranks, write_html, write_perfetto
from ccoverlap.analysis.reader import grouped
from ccoverlap.doctor.config import DoctorConfig
from ccoverlap.util.errors import UsageError
from ccoverlap.util.output import OutputError, print_table, unwritable, write_json
from ccoverlap.gpu import provenance
from ccoverlap.analysis import Process, analyze


def run(cfg: DoctorConfig, cmd: list[str]) -> int:
    """Run `cmd` with the capture injected, then say what it captured; the exit code is the command's, or 2 where
    it succeeded but nothing was profiled or the analysis failed, 1 where only an output could not be written
    (the CLI's one line for its OutputError). A closed stdout (`| head`) costs no file: they are written first,
    and standard output's OutputError comes after them."""
    found(cmd, os.environ, " (nothing was captured)")
    out = Path(cfg.out)
    launch, why = observed(cfg, out)
    if why:
        print(f"ccoverlap doctor: {why}: no alone window and no launch marks (what communication and compute lose "
              "beside each other stays unknown)", file=sys.stderr)
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    received: list[int] = []
    code = launch.run(cmd, received=received)
    try:
        failures = diagnose(out, cfg, cmd, code, signal.Signals(received[0]).name if received else None)
    except (UsageError, OSError) as exc:  # the program's exit code stands, whatever the doctor met
        if code != 0:
            return end_as(code)
        if isinstance(exc, OutputError):  # main()'s one line, exit 1 (standard output's after the files)
            raise
        failures = [str(exc)]
    if made and not any(out.iterdir()):
        out.rmdir()
    if code != 0:
        return end_as(code)
    for failure in failures:
        print(f"ccoverlap doctor: error: {failure}", file=sys.stderr)
    return 2 if failures else 0


def observed(cfg: DoctorConfig, out: Path) -> tuple[Launch, str | None]:
    """The doctor's launch: the caller's setting and the capture, with the launch interposer preloaded in
    pass-through (no pad, no hint beyond what the caller's environment gives) writing its stats into `out`: its
    serialized launches make the alone window, its stats the marks levers leave. Where it is not built: the
    capture alone, and why."""
    capture = Launch(whole=False, jobs={startup.DOCTOR_ENV: cfg.capture().job()})
    if not built():
        return capture, "the launch interposer is not built (pip install -e .)"
    fields = {"stats": str(out.resolve() / record.STATS_NAME)} | ({"comm": cfg.comm_regex} if cfg.comm_regex else {})
    return replace(capture, fields=fields, interposer=True), None


def diagnose(out: Path, cfg: DoctorConfig, cmd: list[str], code: int, interrupted: str | None = None) -> list[str]:
    """Write --report and --json from what was captured in `out`, then say it: the step times and the analysis
    (`interrupted`: the signal that stopped the run, said in both). Returns what failed (one line each): nothing
    profiled, a file that could not be read or written; raises the OutputError of a file that could not be
    written where nothing else failed (util/output's one line, exit 1)."""
    records, bad = record.read_all(out)
    failures = [str(e) for e in bad]
    on_cpu = {r.trace.name for r in records if r.trace and r.cuda is False}
    traces = sorted(p for p in out.glob("*" + record.TRACE_SUFFIX) if p.name not in on_cpu)
    if not on_cpu and not traces and not bad:
        failures.append(_nothing(records, cfg, out))
    result, why_none = None, ("the program ran on the CPU (no GPU kernels in its traces)" if on_cpu and not traces
                              else failures[-1] if failures else "no trace was written")
    if line := unreached(records, out):
        failures.append(line)
    cpu_ranks: list[cpu.CpuRank] = []  # on the CPU alone: the CPU timeline's exposed communication (analysis.cpu)
    if on_cpu and not traces:
        cpu_ranks, cpu_problems = cpu.analyze_cpu(sorted(out / name for name in on_cpu), cfg.comm_regex)
        for problem in cpu_problems:
            print(f"ccoverlap doctor: {problem}", file=sys.stderr)
    if traces:
        result, unusable = _analyze(out, traces, cfg.comm_regex, record.processes(out, records))
        failures += unusable
        why_none = None if result is not None and result.ranks else "no trace could be analysed: " + "; ".join(unusable)
    written: list[Path] = []
    trace = None  # the annotated trace, where written
    unwritten: list[OutputError] = []  # the files that could not be written: each said, the others still written
    if cfg.perfetto and not why_none:
        try:
            trace = write_perfetto(result, Path(cfg.perfetto))
        except OutputError as exc:
            unwritten.append(exc)
    if cfg.report and not why_none:
        try:
            written = write_html(result, Path(cfg.report), trace)
        except OutputError as exc:
            unwritten.append(exc)
    if cfg.json:
        doc = {"provenance": provenance.collect(), "command": cmd, "exit_code": code, "interrupted": interrupted,
               "out": str(out),
               "step_times": [r.summary() for r in records],
               "analysis": document(result, None, written) if not why_none else None,
               "cpu_analysis": cpu.document({out.name: cpu_ranks}) if cpu_ranks else None,
               "no_analysis": why_none, "failures": failures}
        try:
            write_json(cfg.json, doc, schema=True)
        except OutputError as exc:
            unwritten.append(exc)
            cfg = replace(cfg, json=None)
    _say(out, records, len(on_cpu) + len(traces), code, None if why_none else result, why_none, cfg, written, trace,
         cpu_ranks, interrupted)
    if len(unwritten) == 1 and not failures:  # one output fault alone: the CLI's one line naming it, exit 1
        raise unwritten[0]
    return failures + [str(exc) for exc in unwritten]


def _say(out: Path, records: list[record.RankRecord], traces: int, code: int, result, why_none: str | None,
         cfg: DoctorConfig, written: list[Path], trace: Path | None = None, cpu_ranks: Sequence[cpu.CpuRank] = (),
         interrupted: str | None = None) -> None:
    """The terminal's part: what was captured, the step times, the analysis and its verdicts, the files
    written (`written`: the report's; `trace`: the annotated trace; cfg.json: None where it could not be
    written); `cpu_ranks`: the CPU timeline's analysis, where the program ran on the CPU alone; `interrupted`:
    the signal that stopped the program, said first."""
    print(_captured(out, records, traces, code, interrupted))
    if any(r.steps for r in records):
        print_table("step times per rank, ms (host clock, steps the profiler did not touch)",
                    ["rank", "node", "steps", "window", "median", "min", "max", "GPU median", "profiled median"],
                    [_row(r) for r in records])
    if result is not None:
        _show(result)
        _windows(records, result)
    elif cpu_ranks:
        cpu.print_cpu({out.name: list(cpu_ranks)}, "overlap on the CPU timeline (no GPU kernels), ms per rank")
    elif traces:
        print(f"no overlap analysis: {why_none}" + ("; step times above" if any(r.steps for r in records) else ""))
    if cfg.report:
        print(f"report: {written[0]}" if written
              else f"no report written to {cfg.report}: {why_none or 'it could not be written'}")
    if cfg.perfetto:
        print(f"annotated trace: {trace} (open it in https://ui.perfetto.dev or chrome://tracing)" if trace
              else f"no annotated trace written to {cfg.perfetto}: {why_none or 'it could not be written'}")
    if cfg.json:
        print(f"json: {cfg.json}")


def _show(result) -> None:
    """The analysis on the terminal: per rank the verdict, known misconfigurations and the launch marks."""
    print_ranks(result, "overlap in the profiled steps, ms per rank (all but the last step, as HTA)")
    for r in result.ranks:
        if line := r.verdict.line:
            print(f"verdict rank {r.rank}: {line}")
        for f in r.findings:
            print(f"rule rank {r.rank} ({f.rule}): {f.line}")
        if (marks := r.diagnosis.launches) is not None:
            print(f"launches rank {r.rank}: {_marks(marks)}")
            seen = levers.marks_seen(marks)
            print(f"levers in effect rank {r.rank}: " + "; ".join(
                f"{name} {'yes' if v else 'no' if v is False else 'unknown'}" for name, v in seen.items()))


def _marks(s) -> str:
    """What the launches showed (control/interposer.LaunchStats), in one line: the marks levers leave."""
    comm = "no communication launch" if not s.comm_launches else (
        f"{s.comm_launches} communication launch(es) on stream priority {_set(s.comm_priorities)}, clusters "
        f"{_set(s.comm_clusters)}, " + (f"{s.comm_grid[0]}-{s.comm_grid[1]} CTAs of " if s.comm_grid else "")
        + (f"{s.comm_threads[0]}-{s.comm_threads[1]} threads" if s.comm_threads else ""))
    green = f"; compute in green contexts of {min(s.sm_limits.values())} SMs" if s.sm_limits else ""
    return (f"{comm}; {s.padded} padded launch(es), carveout hint on {s.carveout_set} compute and "
            f"{s.comm_carveout_set} communication kernel(s){green}")


def _set(values) -> str:
    return "/".join(map(str, sorted(values))) or "?"


def _windows(records: list[record.RankRecord], result) -> None:
    """Per rank: the alone window, matched, what each window cost in wall time, and the hold before each step."""
    for r in records:
        m = result.alone.get((result.ranks[0].strategy, r.rank)) if result.ranks else None
        cost = ", ".join(f"{what} {s:.2f} s" for what, s in zip(("window", "alone window"), r.window_s)
                         if s is not None)
        if m is not None:
            print(f"alone window rank {r.rank}: {m.matched} of {m.launches} launch(es) matched"
                  + (f" (first unmatched: {m.first})" if m.first else "") + (f"; {cost}" if cost else ""))
        elif r.alone_note:
            print(f"alone window rank {r.rank}: none: {r.alone_note}")
        if r.hold:
            late = r.hold["timed_out"]
            print(f"hold rank {r.rank}: the GPU held before each of {r.hold['held']} profiled step(s) until its "
                  "optimizer step ended" + (f"; {late} let go by the timer after {r.hold['timeout_ms']:g} ms (the host "
                                            "waited for the GPU inside the step)" if late else ""))
        elif r.hold_note:
            print(f"hold rank {r.rank}: not held: {r.hold_note}")


def _captured(out: Path, records: list[record.RankRecord], traces: int, code: int,
              interrupted: str | None = None) -> str:
    ended = (f"interrupted by {interrupted}: " if interrupted else "") + \
        ("" if code == 0 else f"the command ended with {ending(code)}; ")
    if not records and not traces:
        return f"ccoverlap doctor: {ended}captured nothing in {out}"
    ranks = ", ".join(str(r.rank) for r in records) or "-"
    where = record.nodes(records)
    across = (f" on {len(where)} nodes ({'; '.join(f'{n}: {_ranks(rs)}' for n, rs in where.items())})"
              if len(where) > 1 else "")
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


def _nothing(records: list[record.RankRecord], cfg: DoctorConfig, out: Path) -> str:
    """Why no trace was written, in one line."""
    if not records and (full := unwritable(out)):
        return f"nothing was recorded: --out {out}: cannot write ({full})"
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


def _analyze(out: Path, traces: list[Path], comm_regex: str | None, processes: dict[int, Process]):
    """The analysis of `out`, and one line for each trace it could not use (its other notes go to stderr)."""
    try:
        result = analyze(out, None, comm_regex, processes=processes)
    except UsageError as exc:
        return None, [str(exc)]
    used = {p.name for ranks in result.files.values() for p in ranks.values()}
    unusable = {p.name for p in traces} - used
    failures: dict[str, str] = {}  # one line a file: why it was skipped
    for problem in result.problems:
        name = problem.path.name
        if name in unusable and (name not in failures or problem.message.startswith("skipped")):
            failures[name] = str(problem)
    for line in grouped([p for p in result.problems if p.path.name not in unusable]):  # one line per kind
        print(f"ccoverlap doctor: {line}", file=sys.stderr)
    return result, [failures.get(name, f"{out / name}: not analysed") for name in sorted(unusable)]
