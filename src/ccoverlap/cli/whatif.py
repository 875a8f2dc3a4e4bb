"""`ccoverlap whatif`: predict each lever's effect from one doctor capture, on this GPU or another."""
from __future__ import annotations

import argparse
from pathlib import Path

from ccoverlap.util.errors import UsageError
from ccoverlap.util.options import Outputs, add_options, add_subcommand, from_args, path_arg
from ccoverlap.util.output import STDOUT, check_outputs, print_table, print_text, warn, write_json
from ccoverlap.whatif.config import WhatIfConfig
from ccoverlap.doctor import record
from ccoverlap.whatif import plots, session

EPILOG = """\
DIR is a `ccoverlap doctor` capture (its traces and the alone window beside
them: each launch's time alone). Every typical step of its lowest rank is
simulated CTA by CTA under the residency rules, stream priorities and hardware
queues, each CTA at its alone pace slowed by what shares its SM and the memory
system (parameters fitted once per GPU on the lab: docs/whatif.md); each lever
is a transformation of those steps, the median over them reported. First the
simulated default must reproduce the capture: its step within 5% of the measured
one and each collective's start within max(5% of the step, 50 us); otherwise the
capture is refused in one line (no lever predicted; --unvalidated prints them
anyway, labelled). So is a capture whose steps the profiler paced by the host
(the GPU idle 5% or more of the median typical step, the steps 5% or more slower
than the program's own): unprofiled its launches queue and may contend as the
trace never shows; `ccoverlap doctor --hold on` captures them queued. A
prediction is anchored: the measured step x simulated lever
/ simulated default; where the doctor's step records show what an unprofiled
step took, "unprofiled ms" is that step plus the prediction's change
(the profiler's cost is said where above 5%). The interval is the fit's
90th-percentile error (and, for another GPU, both ends of its roofline ratio). Levers without a model say so.
Predictions for another GPU, bus bandwidth or world size are labelled with their
assumptions: they are predictions, never measurements.

examples:
  ccoverlap whatif ccoverlap-doctor-20261202-120000
  ccoverlap whatif DIR --lever priority --lever priority+shape --device a100
  ccoverlap whatif DIR --busbw 40 --capture-busbw 280 --world 64 --json -
"""


def register(sub) -> None:
    p = add_subcommand(
        sub, "whatif", run,
        help="predict each lever's effect from one doctor capture (here, on other GPUs, other networks)",
        description="Simulate the capture's typical steps block by block; where the simulated default reproduces "
        "the measured step, print per lever the predicted step (anchored to the measured one), when communication "
        "starts, the exposed communication, the critical path's communication and the change against the capture; "
        "otherwise say in one line why this capture cannot be predicted.",
        epilog=EPILOG)
    p.add_argument("dir", type=path_arg, metavar="DIR", help="a `ccoverlap doctor` output folder")
    add_options(p, WhatIfConfig)
    add_options(p, Outputs)


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.3f}"


def _path(path) -> str:
    """A critical path in one line: each run of launches on one stream as its count, the launches that cross
    streams (after an event, or the room another kernel left) by name."""
    parts: list[list] = []
    for name, stream, how in path:
        if parts and how == "stream" and parts[-1][1] == stream:
            parts[-1][2] += 1
        else:
            parts.append([name, stream, 1, how])
    return " -> ".join(f"{name[:40]} (stream {stream}, after {how})" + (f" + {n - 1} more on it" if n > 1 else "")
                       for name, stream, n, how in parts)


def _span(us: list[float]) -> str:
    return f"{us[0] / 1000:.3f}-{us[1] / 1000:.3f}"


def _row(p: dict, own: bool) -> list[str]:
    """One strategy's row: its figures; a range's ends where the capture cannot tell its pace (no other figure:
    they hang on it too); else why there is none."""
    if p["status"] == "ok":
        return [p["strategy"], _ms(p["step_us"]), *([_ms(p["unprofiled_step_us"])] if own else []),
                _span(p["interval"]), _ms(p["comm_start_delay_us"]), _ms(p["exposed_comm_us"]),
                _ms(p["critical_comm_us"]), f"{p['vs_capture']:.3f}x"]
    if p["status"] == "range":
        lo, hi = p["ratio_range"]
        return [p["strategy"], _span(p["step_range_us"]), *([_span(p["unprofiled_range_us"])] if own else []),
                _span(p["interval"]), "-", "-", "-", f"{lo:.3f}-{hi:.3f}x"]
    return [p["strategy"], p["status"], *([""] * (6 + own))]


def _table(report: dict) -> None:
    own = report.get("unprofiled") is not None  # the doctor's step records say what an unprofiled step took
    print_table(
        f"{report['source']}: {report['label']}",
        ["strategy", "step ms", *(["unprofiled ms"] if own else []), "interval ms", "comm start delay ms",
         "exposed comm ms", "critical comm ms", "vs capture"],
        [_row(p, own) for p in report["predictions"]],
        caption="; ".join([report["anchored"], *report["notes"]]))
    for note in dict.fromkeys(n for p in report["predictions"] if p["status"] == "range" for n in p["notes"]
                              if n in session.RANGE_NOTES):
        print_text(f"a range a-b: {note}")
    for p in report["predictions"][1:]:  # what each lever's prediction assumes where the capture cannot tell
        for note in dict.fromkeys(n for n in p.get("notes", ()) if n not in session.RANGE_NOTES):
            print_text(f"{p['strategy']}: {note}")
    if path := report["predictions"][0].get("critical_path"):
        print_text("critical path of the default: " + _path(path))


def run(args: argparse.Namespace) -> int:
    cfg = from_args(WhatIfConfig, args).validate()
    root = Path(args.dir)
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory (give a `ccoverlap doctor` output folder)")
    check_outputs({"--json": cfg.json, "--plot": cfg.plot}, inputs=(root,), force=args.force)
    processes, left_out = record.folder_processes(root)
    for line in left_out:
        warn(line)
    report = session.run(cfg, root, processes, show=True)
    if cfg.json:
        write_json(cfg.json, report, schema=True)
    if cfg.json != STDOUT:
        if report["refused"]:
            print_text(f"{report['source']}: {report['refused']}")
        else:
            _table(report)
    if cfg.plot and report["refused"]:
        print_text(f"{cfg.plot} not written: no lever is predicted for this capture")
    elif cfg.plot:
        plots.predictions(report, Path(cfg.plot))
        print_text(f"wrote {cfg.plot}")
    return 0
