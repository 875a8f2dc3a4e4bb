"""The typed reader (issue 22) against the streaming reader it replaced (tests/trace_reference.py), one trace.

Builds one rank's trace of about --mb MB from the recorded H200 DDP trace (as
analyze_vs_hta.py builds them), then reads it with each reader in fresh
processes, interleaved (the first reader alternating), --reps times: wall and
CPU seconds, peak RSS (VmHWM), kernels read. CPU seconds are the figure that
a loaded machine leaves comparable. Writes the samples and provenance to --out.

Beside the medians, `peak_rss_over_json`: each reader's peak RSS over the trace's size; --derive adds it to a
record written before, measuring nothing.

usage: python bench/analysis/reader_vs_old.py --mb 150 --reps 3 --out bench/results/reader-vs-old-150-cpu.json
       python bench/analysis/reader_vs_old.py --derive RECORD.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyze_vs_hta import REPO, SOURCES, build, provenance  # noqa: E402

READ = """
import os, resource, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
if sys.argv[1] == "typed":
    from ccoverlap.analysis.reader import read_trace
else:
    from trace_reference import read_trace
t0, c0 = time.perf_counter(), time.process_time()
trace = read_trace(Path(sys.argv[2]))
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(wall, cpu, int(hwm.split()[1]) * 1024, len(trace.kernels), os.getloadavg()[0])
"""


def rss_over_json(medians: dict[str, dict], mb: float) -> dict[str, float]:
    """Each reader's peak RSS as a multiple of the trace's size."""
    return {name: round(m["peak_rss_mb"] / mb, 2) for name, m in medians.items()}


def main() -> None:
    if sys.argv[1:2] == ["--derive"]:
        for path in map(Path, sys.argv[2:]):
            record = json.loads(path.read_text())
            record["peak_rss_over_json"] = rss_over_json(record["medians"], record["json_mb"])
            path.write_text(json.dumps(record, indent=1) + "\n")
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=150.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    samples: dict[str, list[dict]] = {"typed": [], "ijson (before issue 22)": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank0_trace.json"
        mb = build(SOURCES[0], args.mb, 0, 1, path) / 1e6
        code = READ.format(tests=str(REPO / "tests"))
        for rep in range(args.reps):
            for name in (list(samples) if rep % 2 == 0 else list(samples)[::-1]):
                out = subprocess.run([sys.executable, "-c", code, name.split()[0], str(path)], env=env,
                                     capture_output=True, text=True, check=True).stdout.split()
                wall, cpu, hwm, kernels, load = float(out[0]), float(out[1]), int(out[2]), int(out[3]), float(out[4])
                samples[name].append({"rep": rep, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                                      "mb_per_cpu_s": round(mb / cpu, 1), "peak_rss_mb": round(hwm / 1e6, 1),
                                      "kernels": kernels, "load_after": load})
                print(f"rep {rep} {name}: {wall:.2f} s wall, {cpu:.2f} s CPU, {hwm / 1e6:.0f} MB", file=sys.stderr)
    medians = {name: {k: statistics.median(s[k] for s in rows)
                      for k in ("wall_s", "cpu_s", "mb_per_cpu_s", "peak_rss_mb")}
               for name, rows in samples.items()}
    typed, old = medians["typed"], medians["ijson (before issue 22)"]
    args.out.write_text(json.dumps({
        "what": f"read_trace on one {mb:.1f} MB trace built from {SOURCES[0].relative_to(REPO)}: the typed reader "
                f"against the ijson one it replaced, {args.reps} interleaved repetitions in fresh processes",
        "json_mb": round(mb, 1), "medians": medians, "cpu_speedup": round(old["cpu_s"] / typed["cpu_s"], 2),
        "peak_rss_over_json": rss_over_json(medians, mb),
        "samples": samples, "provenance": provenance(args, None)}, indent=1) + "\n")
    print(json.dumps(medians), file=sys.stderr)


if __name__ == "__main__":
    main()
