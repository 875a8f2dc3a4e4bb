"""`ccoverlap analyze`: which communication is exposed, what compute could have hidden it, what padding did."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ccoverlap.analysis.config import AnalyzeConfig
from ccoverlap.analysis.summary import document, print_ranks, report_folder, write_html, write_perfetto
from ccoverlap.util import lifetime
from ccoverlap.util.errors import UsageError
from ccoverlap.util.options import Outputs, add_options, add_subcommand, from_args, path_arg
from ccoverlap.util.output import STDOUT, check_outputs, print_table, write_json
from ccoverlap.analysis import analyze, short_name
from ccoverlap.analysis.metrics import strategy_verdict
from ccoverlap.analysis.reader import grouped, no_cyclic_gc
from ccoverlap.doctor import record

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
    # a positional: add_options makes options only
    p.add_argument("dir", type=path_arg, metavar="DIR",
                   help="folder of traces, or of one folder of traces per strategy, or one trace file")
    add_options(p, AnalyzeConfig)
    add_options(p, Outputs)


@no_cyclic_gc()  # through the output too: re-enabled with the result alive, it rescans every object of it
def run(args: argparse.Namespace) -> int:
    lifetime.at_once()  # every output below is written whole and closed, every forked process reaped, on return
    cfg = from_args(AnalyzeConfig, args).validate()
    check_outputs({"--json": cfg.json, "--report": cfg.report, "--perfetto": cfg.perfetto},
                  report_folder(cfg.report), inputs=(args.dir, cfg.baseline), force=args.force)
    processes, left_out = record.folder_processes(Path(args.dir))
    for line in left_out:
        print(f"ccoverlap analyze: {line}", file=sys.stderr)
    result = analyze(args.dir, cfg.baseline, cfg.comm_regex, processes=processes, jobs=cfg.workers,
                     keep_traces=bool(cfg.report or cfg.perfetto), progress=True, max_trace_mb=cfg.max_trace_mb)
    if not result.ranks:
        return _cpu(args.dir, cfg, result.problems)
    for line in grouped(result.problems):  # one line per kind of note, with its files
        print(f"ccoverlap analyze: {line}", file=sys.stderr)
    trace = write_perfetto(result, cfg.perfetto) if cfg.perfetto else None
    written = write_html(result, cfg.report, trace) if cfg.report else []
    if cfg.json:
        write_json(cfg.json, document(result, cfg.baseline, written, rows=cfg.rows), schema=True)
        if cfg.json == STDOUT:
            return 0
    print_ranks(result, "ccoverlap analyze: ms per rank (--json or --report for everything)")
    padded = [[r.strategy, r.rank, short_name(s.name), s.padded_launches, s.pad_bytes,
               f"{s.resident_blocks_before} -> {s.resident_blocks_after}" if s.resident_blocks_after else "-"]
              for r in result.ranks for s in r.padded_kernels]
    if padded:
        print_table("padded kernels", ["strategy", "rank", "kernel", "launches", "pad B", "blocks/SM"], padded)
    for name in dict.fromkeys(r.strategy for r in result.ranks):  # per rank, the mean over the strategy's ranks
        print(f"verdict {name}: {strategy_verdict([r for r in result.ranks if r.strategy == name]).line}")
    if written:
        print(f"report: {written[0]}")
    if cfg.json:
        print(f"json: {cfg.json}")
    if trace:
        print(f"annotated trace: {trace} (open it in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def _cpu(root: Path, cfg: AnalyzeConfig, problems: list) -> int:
    """No GPU kernel anywhere: the CPU timeline's exposed communication (gloo), where the traces have one."""
    from ccoverlap.analysis import cpu  # on use, as the traces with GPU kernels never need it

    strategies, cpu_problems = cpu.analyze_folders(root, cfg.comm_regex)
    if not strategies:
        lines = grouped(problems)
        if len(lines) == 1:  # one reason (one file given, say): the error's own line names it
            raise UsageError(f"{lines[0]}; nothing could be analysed in {root}")
        for line in lines:
            print(f"ccoverlap analyze: {line}", file=sys.stderr)
        raise UsageError(f"nothing could be analysed in {root}")
    for problem in cpu_problems:
        print(f"ccoverlap analyze: {problem}", file=sys.stderr)
    for flag, path in (("--report", cfg.report), ("--perfetto", cfg.perfetto)):
        if path:
            print(f"ccoverlap analyze: {flag} {path} not written: the traces hold no GPU kernels (the CPU "
                  "timeline's figures are below)", file=sys.stderr)
    if cfg.json:
        write_json(cfg.json, cpu.document(strategies) | {"problems": [str(p) for p in cpu_problems]}, schema=True)
        if cfg.json == STDOUT:
            return 0
    cpu.print_cpu(strategies, "ccoverlap analyze: CPU timeline (no GPU kernels), ms per rank")
    if cfg.json:
        print(f"json: {cfg.json}")
    return 0
