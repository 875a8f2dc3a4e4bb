"""The known-answer programs (bench/known/) on one GPU, in one call: for each, the realized best gain (the program
plain and under each candidate lever, fresh processes interleaved, every step timed), `ccoverlap doctor --json`
on it (its headroom, what a lever reaches, its first lever, its alone window), and `ccoverlap tune` on as many as
the time left allows (trials to the winner). One JSON with provenance and the raw samples.

  python bench/device/known_answers.py --out DIR [--budget-s S] [--programs a,b] [--doctor-only c,d] [--tune a,b]
  python bench/device/known_answers.py --out DIR --programs a,b --levers l1,l2 --no-doctor --tune none
  python bench/device/known_answers.py --reanalyze RUN.json --folders DIR [DIR...] --out OUT.json
  python bench/device/known_answers.py --combine RUN.json OUT.json [DOCTOR.json...] --what TEXT --out RESULTS.json
  python bench/device/known_answers.py --rejudge DOCTOR_ONLY.json --realized RUN.json --out RESULTS.json

Without CUDA (a dry run on the CPU) the GPU parts are skipped and said so; the orchestration, the JSON and the
targets' arithmetic still run, against tests/data/doctor_train.py for the doctor and the tuner. --reanalyze
judges a recorded run again with this commit's analysis of its doctors' folders (traces, alone windows, step
records, the interposer's stats: what `ccoverlap doctor` reads), keeping the run's measurements as they are.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "known"))
from cases import CASES  # noqa: E402

from ccoverlap.control import levers  # noqa: E402
from ccoverlap.util import stats  # noqa: E402

CCOVERLAP = [sys.executable, "-m", "ccoverlap"]
STEPS = 20  # per run; the first WARMUP are left out
WARMUP = 3
NOTHING_PCT = 2.0  # recommend.NOTHING_TO_GAIN_PCT, the threshold
DOCTOR_STEPS = 6  # the doctor's default: 5 analysed steps, 3 typical where the first two are not


def log(*what) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *what, flush=True)


def run(cmd: list[str], timeout: float, env: dict | None = None, cwd: Path | None = None) -> tuple[int, float, str]:
    """(exit code, wall seconds, the output's last lines)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
        code, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as exc:
        code, out = 124, f"timeout after {timeout:.0f} s: {(exc.stdout or b'')[-2000:]!r}"
    return code, time.monotonic() - t0, "\n".join(out.strip().splitlines()[-15:])


def candidates(host: levers.Host) -> list[str]:
    """Every lever that applies here in a fresh process, at the value a strategy means by its name."""
    return [lv.name for lv in levers.LEVERS if not lv.applies(host, "process")]


def fresh(name: str, tag: str, out: Path, env: dict, wrap: list[str] | None = None) -> tuple[dict, int, float, str]:
    """One fresh process of bench/known/<name>.py (STEPS steps, WARMUP left out) under `env`, its command behind
    `wrap` where given: (the step times and losses it wrote, its exit code, its wall seconds, its output's tail)."""
    path = out / f"{name}-{tag}-{time.monotonic_ns()}.json"
    cmd = [sys.executable, str(REPO / "bench" / "known" / f"{name}.py"), "--steps", str(STEPS), "--warmup",
           str(WARMUP), "--json", str(path)]
    code, wall, tail = run([*(wrap or ()), *cmd], 120, env)
    return (json.loads(path.read_text()) if code == 0 and path.exists() else {}), code, wall, tail


def program(name: str, strategy: str | None, out: Path, host: levers.Host, cli: bool = False) -> dict:
    """One fresh run of bench/known/<name>.py, plain (strategy None) or under the strategy: with the environment
    `ccoverlap run --strategy` gives it (control/policy.for_run, the same launch; without the CLI's own
    process, which would add a torch import to every run), or through the CLI itself (`cli`)."""
    from ccoverlap.control.policy import for_run

    env = dict(os.environ)
    if strategy and not cli:
        env = for_run(None, strategy, {}, host).environ(env)
    wrap = [*CCOVERLAP, "run", "--strategy", strategy, "--"] if strategy and cli else None
    got, code, wall, tail = fresh(name, strategy or "plain", out, env, wrap)
    return {"strategy": strategy or "plain", "cli": cli, "code": code, "process_wall_s": wall,
            "samples_ms": got.get("steps_ms"),
            "losses": got.get("losses"), "comm": got.get("comm"), "loop_wall_s": got.get("wall_s"),
            "spans_ms": got.get("spans_ms"), "notes": got.get("notes"),
            "tail": tail if code else None}


class Broken(Exception):
    """The first run of a program failed: the rest would fail too (and spend the device's time)."""


def realized(name: str, out: Path, levers_here: list[str], host: levers.Host, via_cli: str | None) -> dict:
    """Plain, every lever, plain again: fresh processes, interleaved; each lever against the plain runs.
    `via_cli`: a lever run once more through `ccoverlap run` itself (the command a user types), not compared."""
    first = program(name, None, out, host)
    if first["code"] != 0:
        raise Broken(f"{name} plain: exit {first['code']}: {first['tail']}")
    runs = [first] + [program(name, lv, out, host) for lv in levers_here] + [program(name, None, out, host)]
    if via_cli:
        runs.append(program(name, via_cli, out, host, cli=True))
    plain = [r for r in runs if r["strategy"] == "plain" and r["samples_ms"]]
    base = [tuple(r["samples_ms"]) for r in plain]
    losses = plain[0]["losses"] if plain else None
    rows = {}
    for r in runs:
        if r["strategy"] == "plain" or r["cli"] or not r["samples_ms"]:
            continue
        c = stats.compare(base, [tuple(r["samples_ms"])]) if base else None
        rows[r["strategy"]] = {"median_ms": statistics.median(r["samples_ms"]), "ratio": c.ratio if c else None,
                               "ci": [c.lo, c.hi] if c else None, "verdict": c.verdict if c else None,
                               "same_losses": r["losses"] == losses}
    plain_ms = stats.pooled_median(base) if base else None
    faster = {k: v for k, v in rows.items() if v["verdict"] == stats.FASTER}
    best = min(faster, key=lambda k: faster[k]["median_ms"]) if faster else None
    return {"runs": runs, "plain_median_ms": plain_ms, "levers": rows, "best_lever": best,
            "best_gain_ms": plain_ms - faster[best]["median_ms"] if best else 0.0,
            "wave_tail_cost_ms": wave_tail_cost(plain)}


def wave_tail_cost(plain: list[dict]) -> float | None:
    """The wave tail's measured cost in the step, the median over the plain runs' steps: how much later the GEMM
    ended than it would have at its time alone, beyond the collective it joins with (spans from the GEMM's ready
    time: `gemm` its end, `comm_end` the collective's; notes' `gemm_alone_ms`). None: not a wave-tail program."""
    costs = []
    for r in plain:
        spans, alone = r.get("spans_ms") or {}, (r.get("notes") or {}).get("gemm_alone_ms")
        if alone is None or "gemm" not in spans:
            return None
        costs += [max(0.0, g - max(alone, c)) for g, c in zip(spans["gemm"], spans["comm_end"])]
    return statistics.median(costs) if costs else None


def doctor(name: str, out: Path, cmd: list[str] | None = None) -> dict:
    """`ccoverlap doctor --json` on the program: its verdict and what it cost."""
    folder, path = out / f"doctor-{name}", out / f"doctor-{name}.json"
    cmd = cmd or [sys.executable, str(REPO / "bench" / "known" / f"{name}.py"), "--steps", str(STEPS)]
    code, wall, tail = run([*CCOVERLAP, "doctor", "--skip", "5", "--steps", str(DOCTOR_STEPS), "--out", str(folder),
                            "--json", str(path), "--", *cmd], 240)
    return {"code": code, "wall_s": wall, "tail": tail} | view(json.loads(path.read_text()) if path.exists() else {})


def view(doc: dict) -> dict:
    """What the targets need of a doctor's JSON (rank 0)."""
    ranks = ((doc.get("analysis") or {}).get("ranks")) or [{}]
    r = ranks[0]
    times = (doc.get("step_times") or [{}])[0]
    return {"verdict": r.get("verdict"),
            "headroom_ms": r.get("scheduling_headroom_ms"), "lever_headroom_ms": r.get("lever_headroom_ms"),
            "by_mechanism_ms": r.get("headroom_by_mechanism_ms"),
            "recommendations": r.get("recommendations"), "findings": r.get("findings"),
            "launch_marks": r.get("launch_marks"), "span_us": r.get("span_us"),
            "comm_kernels": [{k: c.get(k) for k in ("sm_wait_us", "cause", "blocked_by", "uncontended_us",
                                                    "duration_us")}
                             for c in r.get("comm_kernels", [])],
            "compute_slowed": r.get("compute_slowed"),
            "steps": r.get("steps"), "typical_steps": r.get("typical_steps"), "left_out_steps": r.get("left_out_steps"),
            "analysed_steps": len({c.get("step") for c in r.get("comm_kernels", [])}) or None,
            "alone_windows": (doc.get("analysis") or {}).get("alone_windows"),
            "window_s": times.get("window_s"), "alone_window_s": times.get("alone_window_s"),
            "outside_ms": (times.get("outside_ms") or {}).get("median"),
            "alone_ms": (times.get("alone_ms") or {}).get("median"),
            "problems": ((doc.get("analysis") or {}).get("problems") or [])[:10]}


def tune(name: str, out: Path, budget_min: float, cmd: list[str] | None = None, order: str = "doctor") -> dict:
    """One tuning; `order` is tune's --order (registry: no doctor, the baseline of what its ordering saves)."""
    tag = name if order == "doctor" else f"{name}-{order}"
    folder, path = out / f"tune-{tag}", out / f"tune-{tag}.json"
    cmd = cmd or [sys.executable, str(REPO / "bench" / "known" / f"{name}.py"), "--steps", "40"]
    code, wall, tail = run([*CCOVERLAP, "tune", "--budget", str(budget_min), "--skip", "3", "--steps", "10", "--out",
                            str(folder), "--json", str(path), "--order", order, "--", *cmd], budget_min * 60 + 90)
    doc = json.loads(path.read_text()) if path.exists() else {}
    trials = [{k: t.get(k) for k in ("index", "phase", "name", "status", "effect", "wall_s")}
              | {"median_ms": (t.get("step_ms") or {}).get("median")} for t in doc.get("trials", [])]
    best = (doc.get("best") or {}).get("name")
    screened = [t["name"] for t in trials if t["phase"] == "screen"]
    first_of_best = (next((t["index"] for t in trials if t["name"] == best), None)
                     if doc.get("decision") == "tuned" else None)
    return {"order": order, "code": code, "wall_s": wall, "tail": tail if code else None,
            "decision": doc.get("decision"), "trials_to_verdict": len(trials),
            "reason": doc.get("reason"), "best": best, "speedup": doc.get("speedup"),
            "first_screened": screened[0] if screened else None, "trials_to_winner": first_of_best,
            "doctor": doc.get("doctor"), "trials": trials}


def headroom_met(reach: float, gain: float, step: float) -> bool:
    """The issue's headroom target: what a lever reaches within max(2% of the step, 25% of the gain) of the gain."""
    return abs(reach - gain) <= max(0.02 * step, 0.25 * gain)


def gained_nothing(gain: float, step: float) -> bool:
    """A realized gain below the issue's threshold of the step ("nothing to gain") counts as none."""
    return 100 * gain / step < NOTHING_PCT


def realizes(lever: str | None, real: dict) -> bool:
    """The lever realizes the gain (`realized`'s record): it is the best, or faster and within the noise of the best."""
    row = real["levers"].get(lever) if lever else None
    best = real["levers"][real["best_lever"]]
    close = row is not None and row["verdict"] == stats.FASTER and row["ci"][0] <= best["ci"][1]
    return lever == real["best_lever"] or close


def judge(case: dict, real: dict, doc: dict) -> dict:
    """The issue's targets for one program, per step: the doctor's headline (what a lever reaches in its median
    typical step, analysis/steps.py) against the realized gain, itself a difference of median steps. A JSON of
    an older doctor (its figures sums over the analysed steps) is read as the median of its per-step rows."""
    step = real["plain_median_ms"]
    steps = [s["lever_headroom_us"] / 1000 for s in doc.get("steps") or []]
    per_step = doc.get("typical_steps") is not None  # this doctor's figures are the median typical step's
    n = 1 if per_step else doc.get("analysed_steps") or 3
    mean = None if doc.get("lever_headroom_ms") is None else doc["lever_headroom_ms"] / n
    reach = mean if per_step else statistics.median(steps) if steps else mean
    total = None if doc.get("headroom_ms") is None else doc["headroom_ms"] / n
    gain = real["best_gain_ms"]
    first = (doc.get("recommendations") or [{}])[0].get("lever") if doc.get("recommendations") else None
    first = levers.strategy(first).name if first else None  # nccl-cluster=1 is the strategy nccl-cluster
    out = {"step_ms": step, "headroom_per_step_ms": total, "lever_headroom_per_step_ms": reach,
           "lever_headroom_mean_per_step_ms": mean, "lever_headroom_steps_ms": steps,
           "realized_best_gain_ms": gain, "realized_best_lever": real["best_lever"], "first_lever": first,
           "expected_lever": case["lever"]}
    if step and reach is not None:
        out["headroom_target_met"] = headroom_met(reach, gain, step)
        out["says_cannot_tell"] = (doc.get("verdict") or "").startswith("cannot tell")  # the trace cannot show it
        nothing = 100 * reach / step < NOTHING_PCT and not out["says_cannot_tell"]
        out["says_nothing_to_gain"] = nothing
        if real["best_lever"] is None or gained_nothing(gain, step):
            out["nothing_target_met"] = nothing
        else:
            out["first_lever_target_met"] = realizes(first, real)
    if case.get("atypical_first"):  # the first profiled steps named and left out, and nothing else
        names = [s["name"] for s in doc.get("steps") or []]
        left = [s["step"] for s in doc.get("left_out_steps") or []]
        out["left_out_steps"] = left
        out["atypical_target_met"] = left == names[:case["atypical_first"]]
    if case.get("wave_tail"):
        by = doc.get("by_mechanism_ms") or {}
        out["wave_tail_named"] = "wave tail" in (doc.get("verdict") or "")
        out["wave_tail_cost_ms"] = got = by.get("compute_slowed:wave_tail")
        out["compute_slowed_ms"] = by.get("compute_slowed")
        out["realized_wave_tail_cost_ms"] = want = real.get("wave_tail_cost_ms")
        if got is not None and want:
            out["wave_tail_cost_target_met"] = out["wave_tail_named"] and abs(got - want) <= 0.25 * want
    if doc.get("window_s") and doc.get("alone_window_s"):
        out["alone_window_cost_ratio"] = doc["alone_window_s"] / doc["window_s"]
    return out


def recorded_realization(pattern: str, program: str) -> tuple[dict | None, str | None]:
    """The gains `program` realized in the first recorded run under bench/results/ matching `pattern` that has
    them, and that run's file name; (None, None) where none has."""
    for path in sorted((REPO / "bench" / "results").glob(pattern)):
        real = (json.loads(path.read_text()).get("programs", {}).get(program) or {}).get("realized")
        if real and real.get("levers"):
            return real, path.name
    return None, None


def analysed(folder: Path) -> dict:
    """A recorded doctor folder analysed as `ccoverlap doctor` does, at this commit: what the targets read (view)."""
    from ccoverlap.doctor import record
    from ccoverlap.analysis import analyze
    from ccoverlap.analysis.summary import document

    records, _ = record.read_all(folder)
    result = analyze(folder, None, None, processes=record.processes(folder, records))
    return view({"analysis": document(result, None, []), "step_times": [r.summary() for r in records]})


def reanalyze(run: Path, folders: list[Path], out: Path) -> int:
    """The recorded run judged again: each doctor folder analysed as `ccoverlap doctor` does, at this commit."""
    from ccoverlap.gpu import provenance

    recorded = json.loads(run.read_text())
    doc = {"provenance": provenance.collect(), "recorded": str(run), "programs": {}}
    for folder in folders:  # doctor-NAME, or doctor-NAME@LABEL for another recording of the program
        key = folder.name.removeprefix("doctor-")
        name = key.split("@")[0]
        got = analysed(folder)
        entry = {"folder": str(folder), "doctor": got}
        real = (recorded["programs"].get(name) or {}).get("realized")
        if real:
            entry["judged"] = judge(CASES[name], real, got)
        doc["programs"][key] = entry
        log(key, json.dumps(entry.get("judged") or got["verdict"]))
    out.write_text(json.dumps(doc, indent=1))
    return 0


def combine(run: Path, again: Path, extra: list[Path], out: Path, what: str) -> int:
    """One results file: the recorded run (its measurements, as they are), its re-analysis, and further doctor
    JSONs (a program recorded again), each with its provenance."""
    recorded, re = json.loads(run.read_text()), json.loads(again.read_text())
    progs = {}
    for name, e in recorded["programs"].items():
        entry = {"truth": e["truth"], "expected_lever": e["expected_lever"], "measured": "realized" in e}
        if "realized" not in e:
            progs[name] = entry | {"why": e.get("skipped") or e.get("broken")}
            continue
        r = e["realized"]
        entry |= {"plain_median_ms": r["plain_median_ms"], "realized_best_lever": r["best_lever"],
                  "realized_best_gain_ms": r["best_gain_ms"], "levers": r["levers"],
                  "process_wall_s": [x["process_wall_s"] for x in r["runs"]],
                  "doctor_at_run": {k: e["doctor"].get(k) for k in ("verdict", "headroom_ms", "lever_headroom_ms",
                                                                    "wall_s", "window_s", "alone_window_s",
                                                                    "outside_ms", "alone_ms")},
                  "judged_at_run": e["judged"],
                  "reanalysis": {k: {"judged": v["judged"]} | {f: v["doctor"][f] for f in (
                      "verdict", "recommendations", "findings", "alone_windows", "launch_marks", "steps")}
                      for k, v in re["programs"].items() if k.split("@")[0] == name}}
        progs[name] = entry
    doc = {"what": what, "run_provenance": recorded["provenance"], "reanalysis_provenance": re["provenance"],
           "candidate_levers": recorded["candidate_levers"], "steps_per_run": recorded["steps_per_run"],
           "warmup": recorded["warmup"], "timing_s": recorded["timing_s"], "run_total_s": recorded["total_s"],
           "programs": progs,
           "more_runs": [{"provenance": d["provenance"], "step_times": d["step_times"],
                          "verdict": d["analysis"]["ranks"][0]["verdict"],
                          "alone_windows": d["analysis"].get("alone_windows")}
                         for d in map(lambda p: json.loads(p.read_text()), extra)],
           "run_raw": recorded}
    out.write_text(json.dumps(doc, indent=1))
    return 0


def rejudge(doctors: Path, realized_in: Path, out: Path) -> int:
    """A run's --doctor-only programs judged against the gains another recorded run realized (the programs
    unchanged between them): one file, both runs' provenance, the doctor's figures as recorded."""
    run, before = json.loads(doctors.read_text()), json.loads(realized_in.read_text())
    judged = {}
    for name, e in run["programs"].items():
        real = (before["programs"].get(name) or {}).get("realized")
        if "doctor" in e and "realized" not in e and real:
            judged[name] = {"judged": judge(CASES[name], real, e["doctor"]), "realized_in": realized_in.name}
    out.write_text(json.dumps({"what": f"the --doctor-only programs of {doctors.name} judged against the gains "
                                       f"{realized_in.name} realized", "provenance": run["provenance"],
                               "realized_provenance": before["provenance"], "programs": judged, "run": run},
                              indent=1) + "\n")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reanalyze", type=Path, help="a recorded known-answers.json to judge again")
    p.add_argument("--folders", type=Path, nargs="*", default=[], help="with --reanalyze: its doctors' folders")
    p.add_argument("--combine", type=Path, nargs="+", metavar="JSON",
                   help="RUN REANALYSIS [DOCTOR.json...]: one results file of them, --what saying how they came about")
    p.add_argument("--what", default="", help="with --combine: how the runs came about, in words")
    p.add_argument("--rejudge", type=Path, metavar="JSON", help="a run with --doctor-only programs, to judge "
                   "against --realized")
    p.add_argument("--realized", type=Path, metavar="JSON", help="with --rejudge: the run that realized their gains")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--budget-s", type=float, default=400.0, help="stop starting work after this long (default 400)")
    p.add_argument("--programs", default=",".join(CASES), help="comma-separated, or none (only --tune)")
    p.add_argument("--levers", default="", help="comma-separated levers to realize the --programs under (default: "
                   "every candidate here)")
    p.add_argument("--no-doctor", action="store_true", help="realize the --programs only, without the doctor")
    p.add_argument("--doctor-only", default="", help="comma-separated programs to run the doctor on, not realized "
                   "(their realized gains recorded before: bench/results)")
    p.add_argument("--tune", default="carveout,same_name,threads,cluster,dispatch,persistent_gemm",
                   help="programs to tune, in this order, while time is left")
    p.add_argument("--tune-budget", type=float, default=1.5, help="minutes per tuning")
    p.add_argument("--tune-orders", default="doctor", help="tune's --order values to run each tuned program under "
                   "(doctor,registry: trials to the winner with and without the doctor's ordering)")
    a = p.parse_args()
    if a.rejudge:
        return rejudge(a.rejudge, a.realized, a.out)
    if a.combine:
        return combine(a.combine[0], a.combine[1], a.combine[2:], a.out, a.what)
    if a.reanalyze:
        return reanalyze(a.reanalyze, a.folders, a.out)
    a.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    left = lambda: a.budget_s - (time.monotonic() - started)  # noqa: E731
    from ccoverlap.gpu import provenance

    import torch

    cuda = torch.cuda.is_available()
    host = levers.Host.detect()
    here = candidates(host)
    if a.levers:
        unknown = sorted(set(a.levers.split(",")) - set(here))
        if unknown:
            raise SystemExit(f"--levers: {', '.join(unknown)} not a candidate here ({', '.join(here)})")
        here = a.levers.split(",")
    doc = {"provenance": provenance.collect(), "command": sys.argv, "steps_per_run": STEPS, "warmup": WARMUP,
           "candidate_levers": here, "cuda": cuda, "programs": {}, "timing_s": {}}
    log(f"levers here: {', '.join(here)}; cuda {cuda}")
    for name in [] if a.programs == "none" else a.programs.split(","):
        case = CASES[name]
        entry = {"truth": case["truth"], "expected_lever": case["lever"]}
        if not cuda or left() < 60:
            entry["skipped"] = "no CUDA: the program's kernels need a GPU" if not cuda else "out of time"
            doc["programs"][name] = entry
            continue
        t0 = time.monotonic()
        try:
            entry["realized"] = realized(name, a.out, here, host,
                                         case["lever"] if not doc["timing_s"] and not a.levers else None)
        except Broken as exc:
            entry["broken"] = str(exc)
            doc["programs"][name] = entry
            log(f"broken: {exc}")
            _write(a.out, doc)
            if not doc["timing_s"]:
                return 1  # the first program does not run: stop before spending the device's time
            continue
        t1 = time.monotonic()
        if a.no_doctor:
            doc["timing_s"][name] = {"realized": t1 - t0}
            doc["programs"][name] = entry
            log(name, json.dumps({k: v["ratio"] for k, v in entry["realized"]["levers"].items()}),
                f"realized {t1 - t0:.0f} s, left {left():.0f} s")
            _write(a.out, doc)
            continue
        entry["doctor"] = doctor(name, a.out)
        t2 = time.monotonic()
        entry["judged"] = judge(case, entry["realized"], entry["doctor"])
        doc["timing_s"][name] = {"realized": t1 - t0, "doctor": t2 - t1}
        doc["programs"][name] = entry
        log(name, json.dumps(entry["judged"]), f"realized {t1 - t0:.0f} s, doctor {t2 - t1:.0f} s, left {left():.0f} s")
        _write(a.out, doc)
    for name in [n for n in a.doctor_only.split(",") if n] if cuda else []:
        if left() < 30:
            break
        t0 = time.monotonic()
        entry = doc["programs"].setdefault(name, {"truth": CASES[name]["truth"],
                                                  "expected_lever": CASES[name]["lever"]})
        entry["doctor"] = doctor(name, a.out)
        doc["timing_s"].setdefault(name, {})["doctor"] = time.monotonic() - t0
        log(name, "doctor only:", (entry["doctor"].get("verdict") or "")[:300])
        _write(a.out, doc)
    if not cuda:  # the doctor's and the tuner's plumbing, on the CPU program of the tests
        train = [sys.executable, str(REPO / "tests" / "data" / "doctor_train.py"), "--steps", "16"]
        t0 = time.monotonic()
        doc["dry_run"] = {"doctor": doctor("doctor_train", a.out, train)}
        doc["timing_s"]["dry_doctor"] = time.monotonic() - t0
        t0 = time.monotonic()
        doc["dry_run"]["tune"] = tune("doctor_train", a.out, 1.5, train)
        doc["timing_s"]["dry_tune"] = time.monotonic() - t0
    tuned = []
    for name in a.tune.split(",") if cuda else []:
        for order in a.tune_orders.split(","):
            if name not in CASES or left() < a.tune_budget * 60 + 30:
                continue
            key = "tune" if order == "doctor" else f"tune_{order}"
            t0 = time.monotonic()
            entry = doc["programs"].setdefault(name, {"truth": CASES[name]["truth"],
                                                      "expected_lever": CASES[name]["lever"]})
            entry[key] = tune(name, a.out, a.tune_budget, order=order)
            doc["timing_s"].setdefault(name, {})[key] = time.monotonic() - t0
            tuned.append(f"{name} ({order})")
            shown = ("order", "decision", "best", "first_screened", "trials_to_winner", "trials_to_verdict", "wall_s")
            log("tune", name, json.dumps({k: entry[key][k] for k in shown}))
            _write(a.out, doc)
    doc["tuned"] = tuned
    doc["total_s"] = time.monotonic() - started
    _write(a.out, doc)
    log(f"done in {doc['total_s']:.0f} s")
    return 0


def _write(out: Path, doc: dict) -> None:
    tmp = out / ".known-answers.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out / "known-answers.json")


if __name__ == "__main__":
    sys.exit(main())
