"""Markdown tables of the known-answer runs (bench/results/known-answers-*.json, bench/device/known_answers.py),
for docs/results.md: the doctor against the realized gains (issue 19's programs, and the typical step of issue 27's
run) and tune with the doctor's ordering beside the registry's. The targets are judged by the device script's own
functions, so a table's met or missed is the rule the run was judged by, applied to the figures of the file.

usage: python bench/summarize/known_answers.py bench/results/known-answers-tune-order-2026-12-04-h200.json [...]
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "_known_answers_device", Path(__file__).resolve().parents[1] / "device" / "known_answers.py")
ka = sys.modules.setdefault("_known_answers_device", importlib.util.module_from_spec(_spec))
if not hasattr(ka, "judge"):
    _spec.loader.exec_module(ka)

#: rows of one program recorded twice, as the issue-19 table names them
LABELS = {"cluster": "cluster, run 1's race-y program", "cluster@fixed": "cluster, fixed program (run 2)"}
_REACHES = re.compile(r"a lever reaches [\d.]+ ms \(([\d.]+%)\)")


def _realized_in(doc: dict, name: str) -> dict | None:
    """A program's realized gains in a run's file, or in the run a combined file keeps (its run_raw)."""
    p = doc["programs"].get(name) or {}
    return p.get("realized") or (doc.get("run_raw") or {}).get("programs", {}).get(name, {}).get("realized")


def _met(ok: bool) -> str:
    return "met" if ok else "missed"


def _realized(real: dict) -> str:
    """The levers that realize the gain (the best, and those within its noise: ka.realizes), their step (gain);
    a best gain under the issue's threshold of the step is none."""
    best, step = real["best_lever"], real["plain_median_ms"]
    if best is None:
        return "none"
    if ka.gained_nothing(real["best_gain_ms"], step):
        return (f"none beyond {ka.NOTHING_PCT:g}% ({best} {real['levers'][best]['median_ms']:.3f}: "
                f"{100 * real['best_gain_ms'] / step:.2f}%, {1000 * real['best_gain_ms']:.0f} us)")
    return "; ".join(f"{lv} {row['median_ms']:.3f} ({step - row['median_ms']:.3f})"
                     for lv, row in real["levers"].items() if ka.realizes(lv, real))


def _first(doctor: dict) -> str:
    """The doctor's levers in its order, or what its verdict says instead of one."""
    names = [r["lever"] for r in doctor.get("recommendations") or []]
    return ", then ".join(names) if names else f'none: "{doctor["verdict"].split(":")[0]}"'


def _lever_target(judged: dict) -> str:
    if "nothing_target_met" in judged:
        return f'{_met(judged["nothing_target_met"])} ("nothing to gain")'
    return _met(judged["first_lever_target_met"])


def render_issue19(docs: list[dict]) -> str:
    """Issue 19's programs: run 1's (the combined file: its re-analyses, a program recorded again in more_runs) then
    each later run's, judged by ka.judge on the re-analysed doctor. The combined file keeps an old doctor's per-step
    rows, not their sum (its lever_headroom_ms, of which judge takes the mean per step): the sum is put back."""
    first, *later = docs
    more = {Path(r["step_times"][0]["file"]).parent.name.removeprefix("doctor-"): r for r in first["more_runs"]}
    rows = []  # (program, label, realized, doctor, plain step cell, realized cell)
    for name, p in first["programs"].items():
        real = _realized_in(first, name)
        for key, again in p.get("reanalysis", {}).items():
            doctor = again | {"lever_headroom_ms": sum(s["lever_headroom_us"] for s in again["steps"]) / 1000}
            if key == name:
                rows.append((name, LABELS.get(key, key), real, doctor, f"{real['plain_median_ms']:.3f}",
                             _realized(real)))
            else:  # another recording of the program, its gain run 1's
                outside = more[name]["step_times"][0]["outside_gpu_ms"]["median"]
                rows.append((name, LABELS.get(key, key), real, doctor, f"{outside:.3f} (GPU, outside the window)",
                             f"not measured (run 1's: {real['best_lever']}, {real['best_gain_ms']:.3f})"))
    for i, doc in enumerate(later, 3):
        for name, p in doc["programs"].items():
            real = p["realized"]
            rows.append((name, f"{name} (run {i})", real, p["doctor"], f"{real['plain_median_ms']:.3f}",
                         _realized(real)))
    out = ["| program | plain step ms | realized best (ms gained) | doctor: first lever | a lever reaches, ms per step "
           "(median of 3; mean) | headroom target | first lever = realizing |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, label, real, doctor, plain, realized in rows:
        j = ka.judge(ka.CASES[name], real, doctor)
        reach, mean = j["lever_headroom_per_step_ms"], j["lever_headroom_mean_per_step_ms"]
        median, on_mean = _met(j["headroom_target_met"]), _met(ka.headroom_met(mean, j["realized_best_gain_ms"],
                                                                              j["step_ms"]))
        headroom = median if median == on_mean else f"{median} on the median, {on_mean} on the mean"
        out.append(f"| {label} | {plain} | {realized} | {_first(doctor)} | {reach:.3f} ({mean:.3f}) | {headroom} | "
                   f"{_lever_target(j)} |")
    return "\n".join(out)


def render_typical_steps(docs: list[dict]) -> str:
    """Issue 27's run (its doctors at the run, their figures the median typical step's; its re-analysis's alone
    windows), each program judged by ka.judge against the gain its own run realized or, for the programs unchanged
    since, issue 19's runs (the later files)."""
    run, again, *before = docs
    out = ["| program | realized best (ms gained) | a lever reaches (median typical step) | first lever "
           "| steps left out | alone window matched: run / re-analysis | targets |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, p in run["programs"].items():
        doctor = p["doctor"]
        real = p.get("realized") or next(filter(None, (_realized_in(b, name) for b in before)), None)
        pct = _REACHES.search(doctor["verdict"])
        left = ", ".join("#" + s["step"].split("#")[-1] for s in doctor["left_out_steps"] or []) or "-"
        alone = " / ".join(", ".join(f"{w['matched']} of {w['launches']}" for w in d["alone_windows"])
                           for d in (doctor, again["programs"][name]["doctor"]))
        targets, realized = "-", "not realized"
        if real:
            j = ka.judge(ka.CASES[name], real, doctor)
            realized = _realized(real) + ("" if "realized" in p else " (issue 19)")
            said = [f"headroom {_met(j['headroom_target_met'])}", f"lever {_lever_target(j)}"]
            if "atypical_target_met" in j:
                said.append(f"atypical steps {_met(j['atypical_target_met'])}")
            if "wave_tail_named" in j:
                said.append("wave tail " + ("named" if j["wave_tail_named"] else "not named"))
            targets = ", ".join(said)
        reach = f"{doctor['lever_headroom_ms']:.3f} ms" + (f" ({pct[1]})" if pct else "")
        out.append(f"| {name} | {realized} | {reach} | {_first(doctor)} | "
                   f"{left} | {alone} | {targets} |")
    return "\n".join(out)


def _verdict(run: dict) -> str:
    return f"kept {1 / run['speedup']:.3f}x" if run["decision"] == "tuned" else run["decision"]


def render_tune_orders(docs: list[dict]) -> str:
    """Per program tuned both ways (every record's, in order): the winner, trials to it and to the verdict, the
    verdict with the kept setting's step against the default's."""
    out = ["| program | winner | trials to the winner: doctor / registry | trials to the verdict: doctor / registry "
           "| verdict: doctor / registry |", "|---|---|---|---|---|"]
    for doc in docs:
        for program, p in doc["programs"].items():
            if not (p.get("tune") and p.get("tune_registry")):
                continue
            runs = (p["tune"], p["tune_registry"])
            winner = next((r["best"] for r in runs if r["decision"] == "tuned"), "-")
            to_winner = " / ".join(str(r["trials_to_winner"] or "never") for r in runs)
            out.append(f"| {program} | {winner} | {to_winner} | "
                       f"{' / '.join(str(r['trials_to_verdict']) for r in runs)} | "
                       f"{' / '.join(_verdict(r) for r in runs)} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(render_tune_orders([json.load(open(p)) for p in sys.argv[1:]]))
