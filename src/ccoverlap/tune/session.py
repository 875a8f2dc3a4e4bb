"""One tuning of a user's command: the candidates, the trials, the doctor's advice, the decision and the files it
writes. `ccoverlap tune` checks its options and hands the command here."""
from __future__ import annotations

import datetime as dt
import os
import signal
import sys
from pathlib import Path

from ccoverlap.analysis import analyze, verdict
from ccoverlap.control import levers
from ccoverlap.control.launch import found
from ccoverlap.control.policy import is_tuning_variable
from ccoverlap.control.procs import exit_for, stop_on_signals
from ccoverlap.doctor import record
from ccoverlap.gpu import provenance
from ccoverlap.tune import report, search, space
from ccoverlap.tune.config import TuneConfig
from ccoverlap.tune.search import Advice
from ccoverlap.tune.trial import Runner
from ccoverlap.util import timing
from ccoverlap.util.errors import UsageError
from ccoverlap.util.output import beside, print_table, print_text, warn, write_json
from ccoverlap.util.text import shorten
from ccoverlap.whatif import session as whatif


def run(cfg: TuneConfig, cmd: list[str]) -> int:
    """Tune `cmd` as `cfg` says: trials, the decision, the files; the exit code (130 or the signal's where stopped)."""
    found(cmd, dict(os.environ))
    host = levers.Host.detect()
    candidates = space.arms(host, cfg.levers, cfg.knobs)
    out = Path(cfg.out)
    runner = Runner(cmd, dict(os.environ), out, cfg.skip, cfg.steps, cfg.comm_regex)
    print_text(f"ccoverlap tune: {len(candidates.arms)} candidate(s) on {host.platform}; budget {cfg.budget:g} min; "
               f"trials in {out}")
    doctor = (lambda t: advice(t, cfg.comm_regex)) if host.platform != "cpu" and cfg.order == "doctor" else None
    finder = search.Search(runner, candidates.arms, cfg, doctor, dict(candidates.skipped), on_trial=_progress(cfg))
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
        print(f"ccoverlap tune: interrupted by {signal.Signals(outcome.interrupted).name} before the default ran once; "
              f"nothing written (trial folders in {out})", file=sys.stderr)
        return exit_for(outcome.interrupted)
    code = _finish(outcome, cfg, cmd, runner.policy(outcome.best))
    return exit_for(outcome.interrupted) if outcome.interrupted else code


def _progress(cfg: TuneConfig):
    started = dt.datetime.now()

    def line(t) -> None:
        minutes = (dt.datetime.now() - started).total_seconds() / 60
        step = (f"{timing.summary(t.samples)['median']:.2f} ms" if t.samples
                else shorten((t.error or t.status).splitlines()[-1], 90))
        print(f"[{minutes:4.1f}/{cfg.budget:g} min] trial {t.index} {t.phase:8} {t.policy.name}: {t.status} {step}",
              file=sys.stderr, flush=True)

    return line


def advice(trial, comm_regex: str | None):
    """The doctor's view of its profiled run of the default; None where it has none (and why, on stderr)."""
    if not trial.ok:
        warn(f"the doctor's run failed ({trial.error}): candidates in registry order")
        return None
    try:
        records, _ = record.read_all(trial.folder)
        result = analyze(trial.folder, None, comm_regex, processes=record.processes(trial.folder, records))
    except UsageError as exc:
        warn(f"no doctor's analysis ({exc}): candidates in registry order")
        return None
    if not result.ranks:
        return None
    diagnoses = [r.diagnosis for r in result.ranks]
    v = verdict(diagnoses)
    gains, why = predicted_gains(trial.folder, comm_regex, result)
    return Advice(any(d.comm for d in diagnoses), v.headroom_ms, v.headroom_pct,
                  tuple(r.lever for r in v.recommendations), v.line, v.lever_headroom_pct, gains, why)


def predicted_gains(folder, comm_regex: str | None, analysis=None) -> tuple[dict[str, float] | None, str | None]:
    """The what-if simulator's gain for every lever value the tuner may try, from the doctor's capture (`analysis`:
    the folder as the doctor's view read it, not read again), and None; or None and why not (also on stderr) where
    it cannot simulate it or its simulated default does not reproduce the capture (tune.json keeps the why)."""
    names = [levers.Strategy(((lv.name, v),)).name for lv in levers.LEVERS for v in lv.candidates]
    try:
        gains = whatif.gains(folder, comm_regex, names, analysis) or None
        return gains, None if gains else "the what-if simulator predicted no lever here"
    except whatif.Refused as exc:  # a simulator that misses the measured step may not prune a measured lever
        why = f"no what-if pruning: {exc}; candidates in the doctor's order, none pruned"
    except (UsageError, ValueError, RuntimeError) as exc:
        why = f"no what-if predictions ({exc}): candidates in the doctor's order"
    warn(why)
    return None, why


def _finish(outcome, cfg: TuneConfig, cmd: list[str], best) -> int:
    """Write the policy file (`best`: the outcome's, as its trials ran it), tune.json and the chart; print the
    tables."""
    policy_path, json_path = Path(cfg.policy_out), Path(cfg.json)
    meta = {"decision": "tuned" if outcome.kept else "default kept", "reason": outcome.reason,
            "interrupted": signal.Signals(outcome.interrupted).name if outcome.interrupted else None,
            "speedup": outcome.speedup, "command": cmd,
            "comparison": outcome.comparison.to_dict() if outcome.comparison else None}
    best.save(policy_path, **meta)
    write_json(cfg.json, {"provenance": provenance.collect(), "command": cmd, "config": dict(vars(cfg)),
                          **report.document(outcome, policy_path)}, schema=True)
    try:
        chart = report.chart(outcome, beside(cfg.json, ".png") or Path(cfg.out) / "tune.png")
    except Exception as exc:  # noqa: BLE001 - a picture that fails does not fail the tuning
        warn(f"no chart: {type(exc).__name__}: {exc}")
        chart = None
    print_table("every trial", report.TRIAL_COLUMNS, report.trial_rows(outcome))
    print_table("every setting against the default", report.SETTING_COLUMNS, report.setting_rows(outcome),
                caption="ratio of median step times, 95% interval from a bootstrap over runs and steps")
    for line in report.verdict_lines(outcome):
        print_text(line)
    allow = "".join(f" --allow-env {name}" for name, _ in best.knobs if not is_tuning_variable(name))
    print_text(f"policy: {policy_path} (apply: ccoverlap run --config {policy_path}{allow} -- {' '.join(cmd)})")
    print_text(f"json: {json_path}" + (f"; chart: {chart}" if chart else ""))
    return 0
