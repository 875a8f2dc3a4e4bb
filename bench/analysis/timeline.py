"""Where the time of one `ccoverlap analyze FILE --json OUT --jobs 2` goes: its phases' wall and CPU seconds.

Runs the command REPS times, each in a fresh process (`--child`), with the analysis's phase functions wrapped to
note when each starts and ends (this process's wall clock and CPU seconds), and the two processes a large file's
first pass forks (reader._later: the top level and the later part of the events; analysis._of_steps: the steps'
shapes and the time metrics, after the steps, which it sends first) noting their own. Writes each run's timeline,
the medians of its phases' durations and the load average around each run to --out.

usage: python bench/analysis/timeline.py FILE --reps 3 --out bench/results/analyze-1x157-timeline-cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: (phase, the mark it starts at, the mark it ends at): the parent's own marks, in order.
PHASES = [("imports", "start", "imported"), ("read the text", "> _load", "< _load"),
          ("events, this process's share", "> _split", "> result"),
          ("the other share's wait, unpickling and merge", "> result", "< _split"),
          ("model, alone window, forks", "< _split", "> first_pass"),
          ("rank's first pass", "> first_pass", "< first_pass"), ("cross-rank pass and output", "< first_pass", "end")]


def child(path: str, notes: str) -> None:
    """One run in this process, its marks appended to `notes` (JSON lines; forked processes append theirs)."""
    t0, c0 = time.perf_counter(), time.process_time()

    def note(label: str) -> None:
        with open(notes, "a") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "label": label, "wall": time.perf_counter() - t0,
                                 "cpu": time.process_time() - c0}) + "\n")

    note("start")
    import ccoverlap.analysis as analysis
    from ccoverlap import cli
    from ccoverlap.analysis import parallel, reader
    note("imported")

    def wrap(owner, name: str) -> None:
        fn = getattr(owner, name)

        def marked(*args, **kwargs):
            note(f"> {name}")
            try:
                return fn(*args, **kwargs)
            finally:
                note(f"< {name}")
        setattr(owner, name, marked)

    for owner, name in ((reader, "_load"), (reader, "_split"), (reader, "_later"), (analysis, "first_pass"),
                        (analysis, "_of_steps"), (parallel.Forked, "result")):
        wrap(owner, name)
    sys.argv = ["ccoverlap", "analyze", path, "--json", os.devnull, "--jobs", "2"]
    try:
        cli.main()
    except SystemExit:
        pass
    note("end")


def one(path: str) -> dict:
    """A fresh process's run: the parent's marks, and the CPU seconds of each forked process's work."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as notes:
        subprocess.run([sys.executable, __file__, path, "--child", notes.name], check=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO / "src")), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        rows = [json.loads(line) for line in Path(notes.name).read_text().splitlines()]
    parent = rows[0]["pid"]
    marks: dict[str, dict] = {}
    for r in rows:
        if r["pid"] == parent:
            marks.setdefault(r["label"], r)  # the first: Forked.result comes thrice (the events, _Ahead's two)
    forked = {}
    for label in ("_later", "_of_steps"):
        start = next(r for r in rows if r["label"] == f"> {label}")
        end = next(r for r in rows if r["label"] == f"< {label}" and r["pid"] == start["pid"])
        forked[label] = {"wall_start": round(start["wall"], 3), "wall_end": round(end["wall"], 3),
                         "cpu_s": round(end["cpu"] - start["cpu"], 3)}
    phases = {name: {"wall_s": round(marks[b]["wall"] - marks[a]["wall"], 3),
                     "cpu_s": round(marks[b]["cpu"] - marks[a]["cpu"], 3)} for name, a, b in PHASES}
    return {"wall_s": round(marks["end"]["wall"], 3), "cpu_s": round(marks["end"]["cpu"], 3), "phases": phases,
            "forked": forked}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", metavar="NOTES", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.file, args.child)
    runs = []
    for _ in range(args.reps):
        before = os.getloadavg()[0]
        runs.append(one(args.file) | {"load_before": round(before, 2), "load_after": round(os.getloadavg()[0], 2)})
        print(f"{runs[-1]['wall_s']:.2f} s (load {before:.1f})", file=sys.stderr)
    medians = {name: {k: round(statistics.median(r["phases"][name][k] for r in runs), 3) for k in ("wall_s", "cpu_s")}
               for name, _, _ in PHASES}
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    result = {"what": f"ccoverlap analyze FILE --json --jobs 2, {Path(args.file).stat().st_size / 1e6:.1f} MB, its "
                      f"phases in this process (the parent) and the forked processes' work, {args.reps} runs",
              "medians": medians, "wall_s_median": statistics.median(r["wall_s"] for r in runs), "runs": runs,
              "provenance": {"commit": commit.strip(), "machine": platform.machine(), "cpus": os.cpu_count(),
                             "python": platform.python_version(), "when": time.strftime("%Y-%m-%d %H:%M:%S")}}
    out = json.dumps(result, indent=1) + "\n"
    if args.out:
        args.out.write_text(out)
    else:
        print(out)


if __name__ == "__main__":
    main()
