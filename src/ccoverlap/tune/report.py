"""What a tuning leaves: the table of trials, the per-setting verdicts, the JSON and the chart (pure functions of
the search's Outcome; matplotlib only when the chart is drawn)."""
from __future__ import annotations

import signal
import textwrap
from pathlib import Path

from ccoverlap.util import plotting, stats, timing
from ccoverlap.tune import space
from ccoverlap.tune.search import Outcome, runs
from ccoverlap.util.text import shorten

TRIAL_COLUMNS = ["#", "phase", "setting", "status", "step ms median (min-max)", "result"]
SETTING_COLUMNS = ["setting", "runs", "step ms median", "vs default (95% CI)", "result"]


def _result(trial) -> str:
    if trial.refused:
        return f"CHANGED ({trial.drift:.1e})"
    return "-" if trial.drift is None else "same" if trial.drift == 0 else f"same ({trial.drift:.1e})"


def trial_rows(outcome: Outcome) -> list[list]:
    rows = []
    for t in outcome.trials:
        if t.samples:
            s = timing.summary(t.samples)
            step = f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"
        else:
            step = "-"
        status = t.status if t.ok else f"{t.status}: {shorten(t.error.splitlines()[-1], 70) if t.error else ''}"
        if t.ok and t.no_effect:
            status = f"no effect ({', '.join(t.no_effect)}: no mark in its launches)"
        rows.append([t.index, t.phase, t.policy.name, status, step, _result(t)])
    return rows


def setting_rows(outcome: Outcome) -> list[list]:
    rows = []
    for policy in dict.fromkeys(t.policy for t in outcome.trials):
        timed = runs(outcome.trials, policy)
        median = f"{stats.pooled_median(timed):.2f}" if timed else "-"
        c = outcome.comparisons.get(policy.name)
        vs = "(the baseline)" if policy == space.DEFAULT else c.label() if c else "-"
        refused = next((t.refused for t in outcome.trials if t.policy == policy and t.refused), None)
        failed = any(not t.ok for t in outcome.trials if t.policy == policy)
        no_effect = any(t.no_effect for t in outcome.trials if t.policy == policy)
        result = "CHANGED: refused" if refused else "failed" if failed and not timed else \
            "no effect" if no_effect else "same"
        mark = " <- kept" if outcome.kept and policy == outcome.best else ""
        rows.append([policy.name + mark, len(timed), median, vs, result])
    return rows


def verdict_lines(outcome: Outcome) -> list[str]:
    lines = []
    if outcome.interrupted:
        lines.append(f"interrupted by {signal.Signals(outcome.interrupted).name}: the verdict stands on the trials "
                     "run so far")
    if outcome.advice:
        a = outcome.advice
        lines.append(f"doctor: {a.line}")
    for lever, why in outcome.skipped.items():
        lines.append(f"not tried: {lever}: {why}")
    if outcome.kept:
        lines.append(f"tuned: {outcome.reason} (speedup {outcome.speedup:.3f}x)")
        if (share := outcome.recovered()) is not None:
            lines.append(f"recovered {100 * share:.0f}% of the doctor's scheduling headroom "
                         f"({outcome.advice.headroom_pct:.1f}% of the step)")
    else:
        lines.append(outcome.reason)
    return lines


def document(outcome: Outcome, policy_path: Path | None) -> dict:
    """The JSON's tuning part (the command adds provenance, command and config)."""
    best = outcome.best
    return {
        "decision": "tuned" if outcome.kept else "default kept", "reason": outcome.reason,
        "interrupted": signal.Signals(outcome.interrupted).name if outcome.interrupted else None,
        "best": {"name": best.name, "levers": dict(best.levers), "knobs": dict(best.knobs), "env": dict(best.env),
                 "policy": dict(best.policy), "startup": dict(best.startup)},
        "speedup": outcome.speedup,
        "comparison": outcome.comparison.to_dict() if outcome.comparison else None,
        "settings": {name: c.to_dict() for name, c in outcome.comparisons.items()},
        "doctor": outcome.advice.to_dict() if outcome.advice else None,
        "headroom_recovered": outcome.recovered(),
        "result_tolerance": outcome.tolerance,
        "skipped": outcome.skipped,
        "trials": [t.to_dict() for t in outcome.trials],
        "policy_path": str(policy_path) if policy_path else None,
    }


PHASE_MARKERS = {"baseline": "o", "doctor": "x", "screen": "s", "combine": "D", "confirm": "^"}


def _legend(outcome: Outcome) -> list:
    """Legend handles for what the left panel shows: the phases run, default vs a setting, failed trials."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    phases = list(dict.fromkeys(t.phase for t in outcome.trials if t.samples))
    grey, blue = plotting.COLORS["reference"], plotting.COLORS["compute"]
    handles = [Line2D([], [], ls="", marker=PHASE_MARKERS.get(p, "o"), mfc="none", color="black", label=p)
               for p in phases]  # the marker says the phase, the colour the setting
    if any(t.samples and t.policy == space.DEFAULT for t in outcome.trials):
        handles.append(Patch(color=grey, label="the default"))
    if any(t.samples and t.policy != space.DEFAULT for t in outcome.trials):
        handles.append(Patch(color=blue, label="a candidate"))
    if any(not t.samples for t in outcome.trials):
        handles.append(Patch(color=plotting.COLORS["exposed"], alpha=0.3, label="failed (no steps)"))
    return handles


def chart(outcome: Outcome, path: Path) -> Path:
    """Left: every trial's median step in the order run (default runs grey), with its min-max; right: each
    setting's ratio to the default with its 95% interval, green where faster beyond the noise."""
    fig = plotting.new_figure(11, max(3.0, 0.35 * len(outcome.comparisons) + 1.5), tight=True)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for t in outcome.trials:
        if not t.samples:
            left.axvline(t.index, color=plotting.COLORS["exposed"], alpha=0.3, lw=4)
            continue
        s = timing.summary(t.samples)
        color = plotting.COLORS["reference"] if t.policy == space.DEFAULT else plotting.COLORS["compute"]
        left.errorbar(t.index, s["median"], yerr=[[s["median"] - s["min"]], [s["max"] - s["median"]]],
                      fmt=PHASE_MARKERS.get(t.phase, "o"), color=color, ms=5, capsize=2)
    from matplotlib.ticker import MaxNLocator

    left.xaxis.set_major_locator(MaxNLocator(integer=True))  # trials are counted
    left.set_xlabel("trial, in the order run")
    if handles := _legend(outcome):
        left.legend(handles=handles, fontsize=plotting.SMALL_SIZE, loc="best", framealpha=0.8)
    left.set_ylabel("step time, ms (median, min-max)")
    left.set_title("every trial", fontsize=plotting.TITLE_SIZE)
    names = list(outcome.comparisons)
    for i, name in enumerate(names):
        c = outcome.comparisons[name]
        color = plotting.COLORS["ideal"] if c.verdict == stats.FASTER else plotting.COLORS["exposed"] \
            if c.verdict == stats.SLOWER else plotting.COLORS["reference"]
        right.errorbar(c.ratio, i, xerr=[[c.ratio - c.lo], [c.hi - c.ratio]], fmt="o", color=color, capsize=3)
    if not names:  # nothing was compared (no candidate, or every lever skipped): say why, not an empty box
        right.set_axis_off()
        why = textwrap.fill(outcome.reason or "no candidate", 50)
        right.text(0.5, 0.5, f"no setting compared with the default:\n{why}", ha="center", va="center",
                   fontsize=plotting.SMALL_SIZE, transform=right.transAxes)
        right.set_title("verdict per setting", fontsize=plotting.TITLE_SIZE)
        return plotting.save_png(fig, path)
    right.axvline(1.0, color=plotting.COLORS["edge"], lw=1, ls="--")
    right.set_yticks(range(len(names)), [n + (" (kept)" if outcome.kept and n == outcome.best.name else "")
                                         for n in names], fontsize=plotting.SMALL_SIZE)
    right.invert_yaxis()
    right.set_xlabel("step time / default's (95% CI; < 1 faster)")
    right.set_title("verdict per setting", fontsize=plotting.TITLE_SIZE)
    return plotting.save_png(fig, path)
