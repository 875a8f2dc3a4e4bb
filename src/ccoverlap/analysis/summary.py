"""What an analysis says, in each form: its JSON document, its terminal table, its HTML report.
`ccoverlap analyze` and the doctor both show an analysis through here."""
from __future__ import annotations

from pathlib import Path

from ccoverlap.util.output import print_table
from ccoverlap.analysis.metrics import shown, strategy_values


def write_html(result, path: Path, perfetto: Path | None = None) -> list[Path]:
    """The HTML report at `path` and its PNGs (every file written), linking the annotated trace `perfetto`
    where one was written; util/output.OutputError where it cannot be written."""
    from ccoverlap.analysis.report import write_report  # on use: the report and its plots, only where asked

    return write_report(result, path, perfetto=perfetto)


def report_folder(path: str | Path | None) -> dict[str, Path | None]:
    """The report's PNGs' folder as util/output.check_outputs takes folders (None where it makes none)."""
    if not path:
        return {"--report's folder": None}
    from ccoverlap.analysis.report import files_folder

    return {"--report's folder": files_folder(Path(path))}


def write_perfetto(result, path: Path) -> Path:
    """The annotated trace at `path` (analysis.perfetto, through util/output: OutputError where it cannot be
    written)."""
    from ccoverlap.analysis.perfetto import write

    return write(result, path)


def document(result, baseline: Path | None, written: list[Path], rows: bool = True) -> dict:
    """The JSON of an analysis (`--json`; `ccoverlap doctor --json` holds it too); `rows`: with each rank's
    per-collective and per-step rows (RankMetrics.to_dict)."""
    return {
        "ranks": [r.to_dict(rows) for r in result.ranks],
        "strategies": strategy_values(result.ranks),
        "baseline": str(baseline) if baseline else None,
        "problems": [str(p) for p in result.problems],
        "report": [str(p) for p in written],
    } | ({"missing_ranks": result.missing_ranks} if result.missing_ranks else {}) | (  # as published when none
        {"alone_windows": [{"strategy": s, "rank": r, **m.to_dict()} for (s, r), m in result.alone.items()]}
        if result.alone else {})


def print_ranks(result, title: str) -> None:
    """The terminal's table of the analysis: a row per rank, the metrics that have a terminal column."""
    columns = shown(terminal=True, baseline=result.baseline is not None)  # metrics.METRICS; JSON, report: all
    print_table(title, ["strategy", "rank", *(m.column.short for m in columns)], [r.row(columns) for r in result.ranks])
