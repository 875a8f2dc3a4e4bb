"""A self-contained HTML report: tables, a timeline per rank, bars comparing strategies.

The PNGs are embedded (the HTML file is all one needs to share) and also
written beside it, in <report>_files/, for slides and issues.
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import os
import shutil
import tempfile
from pathlib import Path

from ccoverlap import __version__
from ccoverlap.analysis import Analysis
from ccoverlap.analysis.contention import PARTS
from ccoverlap.analysis.mechanisms.base import Cause
from ccoverlap.analysis.metrics import (exposed_comm, kernel_stats, pad_bytes, reference_for, shown, strategy_values,
                                        strategy_verdict)
from ccoverlap.analysis.plots import strategy_bars_png, timeline_png
from ccoverlap.analysis.model import analysed_kernels, device_limits, short_name
from ccoverlap.analysis.reader import grouped, printable
from ccoverlap.util.output import OutputError, in_place, write_bytes

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:90%}th{max-width:7em}\
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}img{max-width:100%}code{font-size:90%}"""


def _two_places(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}"


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape('-' if v is None else str(v))}</td>" for v in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _image(png: bytes, path: Path, alt: str) -> str:
    path.write_bytes(png)
    return f'<p><img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}"></p>'


def _recommendations(analysis: Analysis) -> str:
    """Per strategy: the verdict (headroom, exposed communication by part) and the levers worth trying."""
    out = ["<h2>Recommendations</h2><p>Per rank, the mean over the strategy's ranks. Headroom: the step's graph "
           "replayed with every mechanism found removed (each collective's wait for SMs, and communication and "
           "compute slowed beside each other, against their measured times alone); a lever's gain is the replay "
           "with only the share it removes taken away. A collective's SM-wait: from when it could have started (its "
           "stream's previous work and the events it waited for done) to its start, while compute held the SMs; "
           "the cause is the resource that kept its CTAs out (registers, threads, shared memory, the carveout, "
           "dispatch order).</p>"]
    for name in dict.fromkeys(r.strategy for r in analysis.ranks):
        ranks = [r for r in analysis.ranks if r.strategy == name]
        v = strategy_verdict(ranks)
        parts = v.exposed_ms  # the median typical step's, as the headroom and the mechanisms beside it
        mech = [[k, "unknown" if ms is None else f"{ms:.3f}"] for k, ms in v.by_mechanism_ms.items()]
        out.append(f"<h3>{html.escape(name)}</h3><p>{html.escape(v.line)}</p>"
                   + _table([f"exposed {p} ms" for p in PARTS],
                            [["unknown" if ms is None else f"{ms:.3f}" for ms in parts.values()]])
                   + (_table(["mechanism", "its replayed cost ms"], mech) if mech else ""))
        if v.recommendations:
            out.append(_table(["lever", "expected gain ms", "evidence"],
                              [[r.lever, f"{r.gain_ms:.3f}", r.evidence] for r in v.recommendations]))
    return "".join(out)


def files_folder(path: Path) -> Path | None:
    """Where the report's PNGs go: <stem>_files/ beside it; None where the report is written in place (a device,
    a FIFO, standard output: the PNGs are in the HTML only)."""
    return None if in_place(path) else path.with_name(path.stem + "_files")


def write_report(analysis: Analysis, path: Path, top: int = 12, perfetto: Path | None = None) -> list[Path]:
    """Write the HTML report and its PNGs (in files_folder(path)); returns every file written.
    `perfetto`: the annotated trace written beside it (analysis.perfetto), linked from the report.

    All or nothing: both are written into a temporary folder beside the report and moved into place
    at the end, so a full disk or an interrupt leaves the previous report (or none), never half of one.
    A report written in place (util/output.in_place) is the HTML alone, made in memory first.
    """
    files = files_folder(path)
    if files is None:
        with tempfile.TemporaryDirectory() as tmp:
            _write(analysis, Path(tmp) / "report.html", Path(tmp), top, perfetto and _perfetto(perfetto, path))
            write_bytes(path, (Path(tmp) / "report.html").read_bytes())
        return [path]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as exc:
        raise OutputError(path, exc) from None
    try:
        new = tmp / "new"
        (new / files.name).mkdir(parents=True)
        names = _write(analysis, new / path.name, new / files.name, top, perfetto and _perfetto(perfetto, path))
        if files.exists():
            files.rename(tmp / "old")  # removed with tmp
        (new / files.name).rename(files)
        os.replace(new / path.name, path)
    except OSError as exc:
        raise OutputError(path, exc) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [path, *(files / name for name in names)]


def _perfetto(trace: Path, report: Path) -> str:
    """The paragraph that links the annotated trace (relative to the report) and says how to open it."""
    link = html.escape(os.path.relpath(trace.absolute(), report.absolute().parent))
    return (f"<p>Annotated trace: <a href=\"{link}\"><code>{link}</code></a>, every rank's captured trace with "
            "lanes of the findings (exposed communication, each collective's SM wait with its cause and blocker, "
            "the lever recommended). Open it in <a href=\"https://ui.perfetto.dev\">ui.perfetto.dev</a> (Open trace "
            "file; it stays on your machine) or in Chrome at <code>chrome://tracing</code> (Load).</p>")


def _write(analysis: Analysis, path: Path, files: Path, top: int, perfetto: str | None = None) -> list[str]:
    """The report at `path`, its PNGs in `files`; returns the PNGs' names."""
    names: list[str] = []

    def image(png: bytes, name: str, alt: str) -> str:
        names.append(name)
        return _image(png, files / name, alt)

    metrics = shown(baseline=analysis.baseline is not None)
    parts = [
        f"<h1>ccoverlap analysis</h1><p>ccoverlap {__version__}, "
        f"{html.escape(_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds'))}; "
        f"baseline: {'given' if analysis.baseline is not None else 'none'}. Times are per rank over the analysed "
        "kernels (the last profiler step is left out, as in HTA). Overlap: the share of communication kernel time "
        "during which a compute kernel also ran (HTA's definition); exposed communication: communication time with "
        "no compute beside it. " + ("Pad B and padded launches: shared memory above the baseline's for the same "
        "kernel." if analysis.baseline is not None else "Padding is measured against a baseline (--baseline, an "
        "unshaped run of the same program); none was given, so no pad is shown.") + "</p>",
        perfetto or "",
        image(strategy_bars_png(strategy_values(analysis.ranks)), "strategies.png", "strategies compared"),
        _table(["strategy", "rank", *(m.column.header for m in metrics)], [r.row(metrics) for r in analysis.ranks]),
        _recommendations(analysis),
    ]
    if analysis.problems:
        parts.append("<h2>Files not analysed or with notes</h2><ul>"
                     + "".join(f"<li><code>{html.escape(line)}</code></li>" for line in grouped(analysis.problems))
                     + "</ul>")
    for name, traces in analysis.strategies.items():
        for rank, trace in traces.items():
            base = analysis.baseline.get(rank) if analysis.baseline else None
            kernels = analysed_kernels(trace)
            reference = reference_for(trace, base)
            marks = [base is not None and pad_bytes(k, reference) > 0 for k in kernels]
            diagnosis = next(r.diagnosis for r in analysis.ranks if (r.strategy, r.rank) == (name, rank))
            waits = [(c.kernel.stream, c.ready_us, c.kernel.ts, c.cause.value) for c in diagnosis.comm
                     if c.cause is not Cause.NONE]
            parts.append(f"<h2>{html.escape(name)}, rank {rank}</h2>"
                         f"<p><code>{html.escape(printable(trace.path))}</code></p>")
            parts.append(image(timeline_png(kernels, marks, f"{name}, rank {rank}", waits),
                               f"timeline_{name}_rank{rank}.png", f"timeline of {name} rank {rank}"))
            stats = kernel_stats(kernels, reference, device_limits(trace.device))
            padding = base is not None  # without a baseline a pad is a guess from the trace alone: not shown
            parts.append("<h3>Kernels (longest total time first)</h3>" + _table(
                ["kernel", "class", "launches", "total ms", "threads", "regs", "smem B",
                 *(["pad B", "padded launches"] if padding else []), "resident blocks/SM (occupancy model)"
                 + (": before -> after the pad" if padding else "")],
                [[short_name(s.name), s.kind, s.launches, f"{s.total_us / 1000:.3f}", s.threads, s.regs, s.smem_bytes,
                  *([s.pad_bytes, s.padded_launches] if padding else []),
                  (f"{s.resident_blocks_before} -> {s.resident_blocks_after}" if padding else s.resident_blocks_before)
                  if s.resident_blocks_after else "-"]
                 for s in stats[:top]],
            ))
            parts.append("<h3>Most exposed communication kernels</h3>" + _table(
                ["kernel", "stream", "start ms", "duration ms", "exposed ms"],
                [[short_name(e.kernel.name), e.kernel.stream, f"{(e.kernel.ts - kernels[0].ts) / 1000:.3f}",
                  f"{e.kernel.dur / 1000:.3f}", f"{e.exposed_us / 1000:.3f}"] for e in exposed_comm(kernels)[:top]],
            ))
            late = sorted(diagnosis.comm, key=lambda c: -c.sm_wait_us)[:top]
            parts.append("<h3>Why collectives started late (longest wait for SMs first)</h3>" + _table(
                ["kernel", "step", "ready ms", "start ms", "SM-wait ms", "cause", "blocked by", "slowdown",
                 "skew ms", "exposed ms", "unresolved waits"],
                [[short_name(c.kernel.name), c.step, f"{(c.ready_us - kernels[0].ts) / 1000:.3f}",
                  f"{(c.kernel.ts - kernels[0].ts) / 1000:.3f}", f"{c.sm_wait_us / 1000:.3f}", c.cause.value,
                  ", ".join(short_name(b) for b in c.blocked_by), _two_places(c.slowdown), f"{c.skew_us / 1000:.3f}",
                  f"{c.exposed_us / 1000:.3f}", len(c.unresolved)] for c in late],
            ))
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>ccoverlap analysis</title>"
                    f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n")
    return names
