"""`ccoverlap analyze`: which communication is exposed, what compute could have hidden it, what padding did."""
from __future__ import annotations

import argparse
import os
import sys

from ccoverlap.analysis.config import AnalyzeConfig
from ccoverlap.analysis.summary import document, print_ranks, report_folder, write_html, write_perfetto
from ccoverlap.model import comm
from ccoverlap.util.errors import UsageError
from ccoverlap.util.options import Outputs, add_options, add_subcommand, from_args, path_arg
from ccoverlap.util.output import STDOUT, check_outputs, print_table, write_json
from ccoverlap.analysis import analyze, short_name, verdict
from ccoverlap.analysis import cpu
from ccoverlap.analysis.trace import grouped

EPILOG = """\
DIR holds torch.profiler traces (*.json, *.json.gz), one per rank (rank from
distributedInfo); each subfolder with traces is one more strategy, as
`ccoverlap bench --trace DIR` writes them for each workload: analyze DIR/<workload>.
Unusable files are named on stderr, one line each, and the rest analysed;
the exit code is 2 only when nothing could be analysed.

examples:
  ccoverlap analyze runs/ --baseline runs/default --report runs/report.html
  ccoverlap analyze runs/priority --perfetto priority.json   then open it in ui.perfetto.dev
  ccoverlap analyze runs/priority --json - | jq '.ranks[].comp_comm_overlap_pct'
"""


def register(sub) -> None:
    p = add_subcommand(
        sub, "analyze", run,
        help="analyse torch.profiler traces: overlap, exposed communication, slowdown, padding",
        description="Per rank: the share of communication time covered by compute (HTA's comp_comm_overlap_pct), "
        "exposed communication, compute, communication and idle time, compute and communication slowdown against "
        "a baseline, and which kernels were padded with shared memory and by how much. Per collective: when it "
        "could have started, how long it waited for SMs and why; per strategy, a verdict: what an ideal scheduler "
        "would save (the scheduling headroom) and the lever most likely to get it.",
        epilog=EPILOG,
    )
    p.add_argument("dir", type=path_arg, metavar="DIR", help="folder of traces, or of one folder of traces per strategy, "
                   "or one trace file")
    p.add_argument("--baseline", type=path_arg, metavar="DIR",
                   help="traces of the reference run (for slowdowns and padding)")
    p.add_argument("--report", type=path_arg, metavar="PATH",
                   help="write a self-contained HTML report (its PNGs also in <name>_files/ beside it)")
    p.add_argument("--perfetto", type=path_arg, metavar="PATH",
                   help="write the annotated trace: every rank's captured trace plus lanes of the findings (exposed "
                   "communication, each collective's SM wait with its cause and blocker, the lever recommended), "
                   "for ui.perfetto.dev or chrome://tracing")
    p.add_argument("--comm-regex", metavar="RE", help="also count kernels whose name matches RE (POSIX extended) as "
                   "communication, besides NCCL's and RCCL's")
    p.add_argument("--json", metavar="PATH", help="write the analysis as JSON to PATH (-: standard output, and "
                   "nothing else there)")
    p.add_argument("--rows", action="store_true", help="with --json: also each collective kernel's row (its wait, "
                   "cause, slowdown) and each step's, per rank; counted only without it (they are most of the JSON of "
                   "a long trace)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                   help="worker processes reading and analysing the ranks (default: the cores, here %(default)s); "
                   "--baseline and --report run in one process: both need every rank's trace model")
    add_options(p, AnalyzeConfig)
    add_options(p, Outputs)


def run(args: argparse.Namespace) -> int:
    comm.check(args.comm_regex)  # before any trace is read
    check_outputs({"--json": args.json, "--report": args.report, "--perfetto": args.perfetto},
                  report_folder(args.report), inputs=(args.dir, args.baseline), force=args.force)
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: valid 1 or more")
    cfg = from_args(AnalyzeConfig, args)
    result = analyze(args.dir, args.baseline, args.comm_regex, jobs=args.jobs,
                     keep_traces=bool(args.report or args.perfetto), progress=True, max_trace_mb=cfg.max_trace_mb)
    if not result.ranks:
        return _cpu(args, result.problems)
    for line in grouped(result.problems):  # one line per kind of note, with its files
        print(f"ccoverlap analyze: {line}", file=sys.stderr)
    trace = write_perfetto(result, args.perfetto) if args.perfetto else None
    written = write_html(result, args.report, trace) if args.report else []
    if args.json:
        write_json(args.json, document(result, args.baseline, written, rows=args.rows), schema=True)
        if args.json == STDOUT:
            return 0
    print_ranks(result, "ccoverlap analyze: ms per rank (--json or --report for everything)")
    padded = [[r.strategy, r.rank, short_name(s.name), s.padded_launches, s.pad_bytes,
               f"{s.resident_blocks_before} -> {s.resident_blocks_after}" if s.resident_blocks_after else "-"]
              for r in result.ranks for s in r.padded_kernels]
    if padded:
        print_table("padded kernels", ["strategy", "rank", "kernel", "launches", "pad B", "blocks/SM"], padded)
    for name in dict.fromkeys(r.strategy for r in result.ranks):  # per rank, the mean over the strategy's ranks
        print(f"verdict {name}: {verdict([r.diagnosis for r in result.ranks if r.strategy == name]).line}")
    if written:
        print(f"report: {written[0]}")
    if args.json:
        print(f"json: {args.json}")
    if trace:
        print(f"annotated trace: {trace} (open it in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def _cpu(args: argparse.Namespace, problems: list) -> int:
    """No GPU kernel anywhere: the CPU timeline's exposed communication (gloo), where the traces have one."""
    strategies, cpu_problems = cpu.analyze_folders(args.dir, args.comm_regex)
    if not strategies:
        for line in grouped(problems):
            print(f"ccoverlap analyze: {line}", file=sys.stderr)
        raise UsageError(f"nothing could be analysed in {args.dir}")
    for problem in cpu_problems:
        print(f"ccoverlap analyze: {problem}", file=sys.stderr)
    for flag, path in (("--report", args.report), ("--perfetto", args.perfetto)):
        if path:
            print(f"ccoverlap analyze: {flag} {path} not written: the traces hold no GPU kernels (the CPU "
                  "timeline's figures are below)", file=sys.stderr)
    if args.json:
        write_json(args.json, cpu.document(strategies) | {"problems": [str(p) for p in cpu_problems]}, schema=True)
        if args.json == STDOUT:
            return 0
    cpu.print_cpu(strategies, "ccoverlap analyze: CPU timeline (no GPU kernels), ms per rank")
    if args.json:
        print(f"json: {args.json}")
    return 0
