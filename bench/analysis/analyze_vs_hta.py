"""`ccoverlap analyze` against Holistic Trace Analysis (HTA) on large multi-rank traces built from recorded ones.

Builds RANKS traces of about MB MB of JSON each from recorded Kineto traces
(default: the two ranks of the real H200 DDP run in tests/data/traces/h200/
default): each source event's own text is repeated end to end, its times shifted,
its correlation and flow ids and ProfilerStep numbers renumbered, so the
events, their args and their formatting are the recorded ones. Then runs, in
fresh processes and interleaved (ours, HTA, ours, HTA, ... the first tool
alternating), `ccoverlap analyze DIR --json --jobs J` and HTA's TraceAnalysis
with its overlap and temporal breakdown (in the Python given by --hta-python,
where HTA is installed), measuring each one's wall time, CPU time and peak
memory (the sum of its processes' RSS, sampled every 20 ms). Writes the raw
samples, their medians, the machine's load average around each sample (the
machine may be shared: a sample under load is slower in wall time, and in CPU
time too) and the provenance to --out. --reuse takes the traces an earlier run
left in --dir (the build is deterministic) instead of building them again. --against CHECKOUT also runs
the ccoverlap of another checkout, interleaved the same way: a before/after on a machine whose speed drifts.

The ratios of the medians are written beside them (`derived`): HTA's wall and CPU over ours, and each tool's
CPU over wall (how many cores it kept busy); --derive adds them to records written before, measuring nothing.

usage: python bench/analysis/analyze_vs_hta.py --ranks 8 --mb 150 --reps 3 --hta-python /tmp/hta-venv/bin/python \\
         --out bench/results/analyze-vs-hta-8x150-cpu.json
       python bench/analysis/analyze_vs_hta.py --derive RECORD.json [RECORD.json ...]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import msgspec

REPO = Path(__file__).resolve().parents[2]
SOURCES = [REPO / "tests/data/traces/h200/default/rank0_trace.json.gz",
           REPO / "tests/data/traces/h200/default/rank1_trace.json.gz"]

HTA = """
import json, os, sys
os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
analysis.get_temporal_breakdown(visualize=False)
print(json.dumps({str(r): float(overlap.loc[r, "comp_comm_overlap_pctg"]) for r in overlap.index}))
"""


class _Doc(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = []


_TS = re.compile(rb'("ts"\s*:\s*)(-?[0-9.eE+-]+)')
_CORR = re.compile(rb'("correlation"\s*:\s*)(\d+)')
_ID = re.compile(rb'("id"\s*:\s*)(\d+)')
_STEP = re.compile(rb'ProfilerStep#(\d+)')


def build(source: Path, mb: float, rank: int, world: int, out: Path) -> int:
    """One rank's trace of about `mb` MB of JSON: `source`'s events repeated (see the module doc); its bytes."""
    text = gzip.open(source).read() if source.name.endswith(".gz") else source.read_bytes()
    doc = json.loads(text)
    events = [bytes(raw) for raw in msgspec.json.decode(text, type=_Doc).traceEvents]
    meta = [e for e, d in zip(events, doc["traceEvents"]) if d.get("ph") == "M"]
    body = [e for e, d in zip(events, doc["traceEvents"]) if d.get("ph") != "M"]
    timed = [d for d in doc["traceEvents"] if "ts" in d]
    span = max(float(d["ts"]) + float(d.get("dur", 0)) for d in timed) - min(float(d["ts"]) for d in timed) + 1000
    corr = 1 + max((int(d["args"]["correlation"]) for d in doc["traceEvents"]
                    if isinstance(d.get("args"), dict) and "correlation" in d["args"]), default=0)
    ids = 1 + max((int(d["id"]) for d in doc["traceEvents"] if isinstance(d.get("id"), int)), default=0)
    steps = 1 + max((int(m) for m in _STEP.findall(text)), default=0)
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    head["distributedInfo"] = dict(head.get("distributedInfo") or {}, rank=rank, world_size=world)
    size, copy = 0, 0
    with open(out, "wb") as fh:
        fh.write(json.dumps(head, indent=2)[:-2].encode() + b',\n  "traceEvents": [\n')
        fh.write(b",\n".join(meta))
        while size < mb * 1e6:
            shift = copy * span
            chunk = b",\n".join(
                _STEP.sub(lambda m: b"ProfilerStep#%d" % (int(m[1]) + copy * steps),
                          _ID.sub(lambda m: m[1] + b"%d" % (int(m[2]) + copy * ids),
                                  _CORR.sub(lambda m: m[1] + b"%d" % (int(m[2]) + copy * corr),
                                            _TS.sub(lambda m: m[1] + repr(float(m[2]) + shift).encode(), e))))
                for e in body)
            fh.write(b",\n" + chunk)
            size += len(chunk) + 2
            copy += 1
        fh.write(b"\n]}\n")
    return out.stat().st_size


def _children(pid: int) -> list[int]:
    """`pid`'s child processes, from each of its threads' /proc children list (a read or two a process: scanning
    every process's stat took 2 ms a sample, a tenth of a core taken from the run measured)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(c) for c in task.read_text().split()]
        except OSError:
            continue
    return out


def _tree_rss(pid: int) -> int:
    """Bytes resident in `pid` and its descendants (from /proc)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += _children(p)
        try:
            rss = next(line for line in open(f"/proc/{p}/status") if line.startswith("VmRSS:"))
            total += int(rss.split()[1]) * 1024
        except (OSError, StopIteration):
            pass
    return total


def measure(argv: list[str], env: dict | None = None) -> dict:
    """Wall and CPU seconds, peak RSS of the process tree, and stdout of one fresh run."""
    with tempfile.TemporaryFile() as out:
        before = os.times()
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_rss(proc.pid))
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        after = os.times()
        err = proc.stderr.read().decode(errors="replace")
        if proc.returncode:
            raise SystemExit(f"{argv[:4]} failed ({proc.returncode}): {err[-2000:]}")
        out.seek(0)
        stdout = out.read()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_rss_mb": round(peak / 1e6, 1), "stdout": stdout}


def _commit(checkout: Path) -> str:
    return subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def _version(name: str, python: str | None = None) -> str | None:
    if python:
        out = subprocess.run([python, "-c", f"from importlib.metadata import version; print(version({name!r}))"],
                             capture_output=True, text=True)
        return out.stdout.strip() or None
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _autogroup() -> str | None:
    """This session's scheduler autogroup and its nice (Linux, /proc/self/autogroup): with autogroups on, the
    cores are shared between sessions first, so a background job's nice 19 does not yield them to this one."""
    try:
        return Path("/proc/self/autogroup").read_text().strip()
    except OSError:
        return None


def provenance(args, hta_python: str | None) -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), None)
    return {
        "machine": {"cpu": cpu, "cpus": os.cpu_count(), "memory_gb": round(os.sysconf("SC_PAGE_SIZE")
                    * os.sysconf("SC_PHYS_PAGES") / 1e9, 1), "host": platform.node()},
        "python": platform.python_version(), "commit": _commit(REPO), "command": " ".join(sys.argv),
        "autogroup": _autogroup(),
        "versions": {"msgspec": _version("msgspec"), "orjson": _version("orjson"),
                     "HolisticTraceAnalysis": _version("HolisticTraceAnalysis", hta_python),
                     "pandas (HTA's)": _version("pandas", hta_python)},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def derived(medians: dict[str, dict]) -> dict:
    """The ratios of the medians: HTA over ours (wall, CPU) where HTA ran, and each tool's CPU over its wall."""
    out = {"cpu_over_wall": {name: round(m["cpu_s"] / m["wall_s"], 2) for name, m in medians.items()}}
    if "hta" in medians and "ccoverlap" in medians:
        out["hta_over_ours_cpu"] = round(medians["hta"]["cpu_s"] / medians["ccoverlap"]["cpu_s"], 2)
    return out


def rederive(paths: list[Path]) -> None:
    """Records written before `derived` existed, given it from their own medians (nothing measured)."""
    for path in paths:
        text = path.read_text()
        record = json.loads(text)
        record["derived"] = derived(record["medians"])
        path.write_text(json.dumps(record, indent=1) + "\n")


def main() -> None:
    if sys.argv[1:2] == ["--derive"]:
        rederive([Path(p) for p in sys.argv[2:]])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=150.0, help="MB of JSON per rank")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="ccoverlap analyze --jobs")
    ap.add_argument("--hta-python", help="a Python with HolisticTraceAnalysis installed (none: ours only)")
    ap.add_argument("--against", type=Path, metavar="CHECKOUT",
                    help="also ccoverlap from another checkout (its src/), interleaved with this one: a before/after "
                    "on the same machine at the same time (named ccoverlap@<its commit>)")
    ap.add_argument("--source", type=Path, nargs="+", default=SOURCES, help="recorded traces, used rank by rank")
    ap.add_argument("--dir", type=Path, help="build the traces here and keep them (default: a temporary folder)")
    ap.add_argument("--reuse", action="store_true",
                    help="with --dir: take the traces already there, where every rank's is")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--note", help="what differs between the checkouts or the conditions, in words (recorded)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        paths = [folder / f"rank{r}_trace.json" for r in range(args.ranks)]
        if others := sorted(set(folder.iterdir()) - set(paths)):  # both tools read the whole folder
            raise SystemExit(f"{folder} holds more than the {args.ranks} trace(s) measured: {others[0].name} (and "
                             f"{len(others) - 1} more); the MB/s would count only ours: give an empty or own --dir")
        reused = args.reuse and args.dir is not None and all(p.is_file() for p in paths)
        sizes = ([p.stat().st_size for p in paths] if reused else
                 [build(args.source[r % len(args.source)], args.mb, r, args.ranks, p) for r, p in enumerate(paths)])
        total_mb = sum(sizes) / 1e6
        print(f"{'reused' if reused else 'built'} {args.ranks} x {sizes[0] / 1e6:.1f} MB in "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
        env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
        ours = [sys.executable, "-m", "ccoverlap", "analyze", str(folder), "--json", "-", "--jobs", str(args.jobs)]
        tools = {"ccoverlap": lambda: measure(ours, env)}
        if args.against:
            other = f"ccoverlap@{_commit(args.against)[:7]}"
            tools[other] = lambda: measure(ours, dict(os.environ, PYTHONPATH=str(args.against / "src")))
        if args.hta_python:
            tools["hta"] = lambda: measure([args.hta_python, "-c", HTA, str(folder)])
        samples: dict[str, list[dict]] = {name: [] for name in tools}
        overlap: dict[str, dict] = {}
        for rep in range(args.reps):
            order = list(tools) if rep % 2 == 0 else list(tools)[::-1]
            for name in order:
                load = os.getloadavg()
                s = tools[name]()
                after = os.getloadavg()
                stdout = s.pop("stdout")
                if rep == 0:
                    mine = name.startswith("ccoverlap")
                    overlap[name] = ({str(r["rank"]): r["comp_comm_overlap_pct"] for r in json.loads(stdout)["ranks"]}
                                     if mine else json.loads(stdout.decode().strip().splitlines()[-1]))
                samples[name].append(s | {"rep": rep, "load_before": round(load[0], 2),
                                          "loadavg_before": [round(x, 2) for x in load],
                                          "loadavg_after": [round(x, 2) for x in after],
                                          "mb_per_s": round(total_mb / s["wall_s"], 1)})
                print(f"rep {rep} {name}: {s['wall_s']:.1f} s, {s['cpu_s']:.1f} CPU s, {s['peak_rss_mb']:.0f} MB "
                      f"(load {load[0]:.1f} -> {after[0]:.1f})", file=sys.stderr)
    medians = {name: {k: statistics.median(s[k] for s in rows) for k in ("wall_s", "cpu_s", "peak_rss_mb", "mb_per_s")}
               for name, rows in samples.items()}
    result = {
        "what": f"ccoverlap analyze --json --jobs {args.jobs} vs HTA (TraceAnalysis, overlap, temporal breakdown) on "
               f"{args.ranks} ranks x {sizes[0] / 1e6:.1f} MB of JSON built from "
               f"{[str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p) for p in args.source]}, "
                f"{args.reps} interleaved repetitions in fresh processes",
        "traces": "reused from --dir (built by an earlier run)" if reused else "built by this run",
        "ranks": args.ranks, "mb_per_rank": round(sizes[0] / 1e6, 1), "total_mb": round(total_mb, 1),
        "medians": medians, "samples": samples,
        "hta_over_ours_wall": (round(medians["hta"]["wall_s"] / medians["ccoverlap"]["wall_s"], 2)
                               if "hta" in medians else None),
        "derived": derived(medians),
        "overlap_pct": overlap,
        "overlap_max_abs_diff": (max(abs(overlap["ccoverlap"][r] - overlap["hta"][r]) for r in overlap["hta"])
                                 if "hta" in overlap else None),
        "against": {"checkout": str(args.against), "commit": _commit(args.against)} if args.against else None,
        "note": args.note,
        "provenance": provenance(args, args.hta_python),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(medians), file=sys.stderr)


if __name__ == "__main__":
    main()
