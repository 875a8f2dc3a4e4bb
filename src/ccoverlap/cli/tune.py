"""`ccoverlap tune`: the fastest levers for an unmodified program, kept only where measurably faster and equal in result."""
from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

from ccoverlap import levers
from ccoverlap.bench.comms import COMMS
from ccoverlap.errors import UsageError
from ccoverlap.tune.config import TuneConfig

from ._config import add_command, from_args
from ._output import check_new_folder, check_writable, print_table, print_text, warn, write_json
from .run import command, found

EPILOG = """\
Every trial runs CMD afresh under one candidate (levers set environment variables,
the interposer's policy and torch start-up calls: they need a fresh process), with
the doctor's capture injected at start-up: steps 1..K are dropped, steps K+1..K+N
timed (CUDA events on GPUs), then every rank drains its GPU, records the norms of
its trained parameters and ends. The default runs first, twice; a run of it under
the profiler lets the doctor order the candidates (and skip the levers where it
sees no communication or no scheduling headroom). Candidates: every lever that
applies here at the values it lists to try (`ccoverlap levers`), and each --env
value. Successive halving screens them, levers that each helped are combined, and
the best is confirmed against the default. It is kept only if the 95% interval of
its step-time ratio to the default lies below 1 and its trained parameters match
the default's within the program's own run-to-run change; otherwise the default
is kept, and the output says why. Ctrl-C or SIGTERM ends the tuning with what it
has (the trial running is stopped).

DIR gets one folder per trial (step times, CMD's output), tune.json (every trial,
the verdict, provenance), tune.png and policy.json. Apply the policy with
`ccoverlap run --config DIR/policy.json -- CMD`, or ccoverlap.enable(path) in the
script. See docs/tune.md.

examples:
  ccoverlap tune -- python train.py
  ccoverlap tune --budget 30 --env NCCL_ALGO=Ring,Tree -- torchrun --nproc-per-node 8 train.py
  ccoverlap tune --levers priority,nccl-ctas --steps 30 -- python -m ccoverlap.bench.train ddp
"""


def register(sub) -> None:
    add_command(
        sub, "tune", TuneConfig, run,
        help="find the fastest levers for an unmodified program; keep them only if faster beyond noise, same result",
        description="Run CMD under the default and under candidate levers and environment knobs, each in fresh "
        "processes, time its optimizer steps, and keep the fastest setting only where it is faster than the "
        "default beyond the run-to-run noise and trains to the same parameters. Writes a policy file for "
        "`ccoverlap run --config` and ccoverlap.enable().",
        epilog=EPILOG, what="the command to tune",
    )


def _config(args: argparse.Namespace) -> TuneConfig:
    cfg = from_args(TuneConfig, args).validate()
    out = check_new_folder(cfg.out or f"ccoverlap-tune-{dt.datetime.now():%Y%m%d-%H%M%S}", "--out")
    json_path = Path(cfg.json).absolute() if cfg.json else out / "tune.json"
    policy_path = Path(cfg.policy_out).absolute() if cfg.policy_out else out / "policy.json"
    for flag, path in (("--json", json_path), ("--policy-out", policy_path)):
        check_writable(path, flag)
    return replace(cfg, out=str(out), json=str(json_path), policy_out=str(policy_path))


def comm_kernels(cfg: TuneConfig) -> str:
    """Communication besides NCCL's kernels: the user's, and ccoverlap's emulated collectives (bench train scripts)."""
    return "|".join(filter(None, (cfg.comm_regex, COMMS["emulate"].comm_kernels)))


def run(args: argparse.Namespace) -> int:
    cfg = _config(args)  # everything checked before the command first runs
    cmd = command(args.argv, "ccoverlap tune --budget 10 -- torchrun --nproc-per-node 8 train.py")
    found(cmd, dict(os.environ))
    from ccoverlap.procs import exit_for, stop_on_signals
    from ccoverlap.tune import search, space
    from ccoverlap.tune.trial import Runner

    host = levers.Host.detect()
    candidates = space.arms(host, cfg.levers, cfg.knobs)
    out = Path(cfg.out)
    comm = comm_kernels(cfg)
    runner = Runner(cmd, dict(os.environ), out, cfg.skip, cfg.steps, comm)
    print_text(f"ccoverlap tune: {len(candidates.arms)} candidate(s) on {host.platform}; budget {cfg.budget:g} min; "
               f"trials in {out}")
    finder = search.Search(runner, candidates.arms, cfg, (lambda t: advice(t, comm))
                           if host.platform != "cpu" else None, dict(candidates.skipped), on_trial=_progress(cfg))
    try:
        out.mkdir(parents=True, exist_ok=True)
        with stop_on_signals():
            outcome = finder.run()
    except OSError as exc:  # a trial's folder or output could not be written (a full disk)
        raise UsageError(f"--out {out}: cannot write a trial's record: {exc.strerror or exc}") from None
    except search.CommandFailed as exc:
        t = exc.trial
        print(f"ccoverlap tune: error: the command fails under the default ({t.folder}): {t.error}", file=sys.stderr)
        return 1
    if outcome.interrupted and not any(t.timed for t in outcome.trials):
        print(f"ccoverlap tune: stopped by {signal.Signals(outcome.interrupted).name} before the default ran once; "
              f"nothing written (trial folders in {out})", file=sys.stderr)
        return exit_for(outcome.interrupted)
    code = _finish(outcome, cfg, cmd)
    return exit_for(outcome.interrupted) if outcome.interrupted else code


def _progress(cfg: TuneConfig):
    started = dt.datetime.now()

    def line(t) -> None:
        minutes = (dt.datetime.now() - started).total_seconds() / 60
        from ccoverlap import timing

        step = f"{timing.summary(t.samples)['median']:.2f} ms" if t.samples else (t.error or t.status).splitlines()[-1][:90]
        print(f"[{minutes:4.1f}/{cfg.budget:g} min] trial {t.index} {t.phase:8} {t.policy.name}: {t.status} {step}",
              file=sys.stderr, flush=True)

    return line


def advice(trial, comm_regex: str | None):
    """The doctor's view of its profiled run of the default; None where it has none (and why, on stderr)."""
    from ccoverlap.analysis import analyze
    from ccoverlap.analysis.recommend import verdict
    from ccoverlap.tune.search import Advice

    if not trial.ok:
        warn(f"the doctor's run failed ({trial.error}): candidates in registry order")
        return None
    try:
        result = analyze(trial.folder, None, comm_regex)
    except UsageError as exc:
        warn(f"no doctor's analysis ({exc}): candidates in registry order")
        return None
    if not result.ranks:
        return None
    diagnoses = [r.diagnosis for r in result.ranks]
    v = verdict(diagnoses)
    return Advice(any(d.comm for d in diagnoses), v.headroom_ms, v.headroom_pct,
                  tuple(r.lever for r in v.recommendations), v.line)


def _finish(outcome, cfg: TuneConfig, cmd: list[str]) -> int:
    from ccoverlap import provenance
    from ccoverlap.tune import report

    policy_path, json_path = Path(cfg.policy_out), Path(cfg.json)
    meta = {"decision": "tuned" if outcome.kept else "default kept", "reason": outcome.reason,
            "speedup": outcome.speedup, "command": cmd,
            "comparison": outcome.comparison.to_dict() if outcome.comparison else None}
    try:
        outcome.best.save(policy_path, **meta)
        write_json(json_path, {"provenance": provenance.collect(), "command": cmd,
                               "config": {k: v for k, v in vars(cfg).items()}, **report.document(outcome, policy_path)})
    except OSError as exc:
        raise UsageError(f"cannot write the results: {exc.strerror or exc}") from None
    try:
        chart = report.chart(outcome, json_path.with_suffix(".png"))
    except Exception as exc:  # noqa: BLE001 - a picture that fails does not fail the tuning
        warn(f"no chart: {type(exc).__name__}: {exc}")
        chart = None
    print_table("every trial", report.TRIAL_COLUMNS, report.trial_rows(outcome))
    print_table("every setting against the default", report.SETTING_COLUMNS, report.setting_rows(outcome),
                caption="ratio of median step times, 95% interval from a bootstrap over runs and steps")
    for line in report.verdict_lines(outcome):
        print_text(line)
    print_text(f"policy: {policy_path} (apply: ccoverlap run --config {policy_path} -- {' '.join(cmd)})")
    print_text(f"json: {json_path}" + (f"; chart: {chart}" if chart else ""))
    return 0
