"""One run of `ccoverlap bench` after its options are checked: the process sets, their progress, the JSON
written after every set (and once more, complete or cut short), the tables and the chart. `ccoverlap bench`
hands its configuration here."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ccoverlap.bench import launcher, schedule
from ccoverlap.bench.catalog import BY_NAME as BY_WORKLOAD
from ccoverlap.bench.catalog import vs_default_note
from ccoverlap.bench.config import BenchConfig
from ccoverlap.control.procs import exit_for
from ccoverlap.util.output import Progress, beside, in_place, print_table, print_text, warn, write_json
from ccoverlap.gpu import provenance
from ccoverlap.bench.plots import bars


def run(cfg: BenchConfig, launcher_kind: str = "spawn", out: Path | None = None) -> int:
    """Run `cfg` (checked), print the tables and write `out` (JSON, and its chart); the exit code: 1 where a
    strategy failed, nothing ran or the outputs differ, 130 or the signal's where stopped, else 0."""
    if launcher_kind == "torchrun":
        launcher.torchrun()
    if note := cfg.comm_backend.note(cfg):
        print_text(note)
    if cfg.trace_dir and cfg.untraced:
        warn(f"--trace: {', '.join(cfg.untraced)} has no training step to trace; traces are written for the others")
    sets, skipped = launcher.plan(cfg)
    run = Run(cfg, provenance.collect(backend=cfg.backend, world_size=cfg.nproc) if out else None, skipped)
    try:
        with launcher.stop_on_signals(), Progress("bench", len(sets)) as progress:
            for ps, new, wall_s in launcher.run_iter(cfg, launcher_kind, sets, progress):
                run.add(ps, new, wall_s)
                if out and not in_place(out):  # after every set, so a run cut short keeps what it measured
                    write_json(out, run.document(complete=False), schema=True)
    except launcher.Stopped as stop:
        if out:
            write_json(out, document := run.document(complete=False, interrupted=str(stop)), schema=True)
        print(f"ccoverlap bench: interrupted by {stop}: every rank ended"
              + (f"; {out} holds {len(document['rows'])} rows (complete: false)" if out else ""), file=sys.stderr)
        return exit_for(stop.signum)
    rows, match, unmatched, lines = results = run.results()
    if out:  # before printing: a closed pipe on stdout must not cost the results
        write_json(out, run.document(complete=True, results=results), schema=True)
        png = beside(out, ".png")
        chart = _chart(rows, png) if png and any(r["status"] == "ok" for r in rows) else None
    _print(rows, match, unmatched, lines, skipped, cfg.repeats)
    if out:
        print_text(f"wrote {out}" + (f" and {chart}" if chart else ""))
    failed = [r for r in rows if r["status"].startswith("failed")]
    return 1 if failed or not rows or not all(m["match"] for m in match.values()) else 0


class Run:
    """What a bench run has so far: the rows of every process set (merged per strategy when written or
    printed), the sets themselves with their wall time, and the strategies not run here."""

    def __init__(self, cfg: BenchConfig, prov: dict | None, skipped: list[dict]):
        self.cfg, self.prov, self.skipped = cfg, prov, skipped
        self.started = time.monotonic()
        self.rows: list[dict] = []  # one per workload (micro: per size) per process set
        self.sets: list[dict] = []  # each set as run: its place, strategy, repeat, wall time, whether all went well

    def add(self, ps: schedule.ProcessSet, rows: list[dict], wall_s: float) -> None:
        self.rows += rows
        self.sets.append({"set": ps.index, "strategy": ps.label, "repeat": ps.repeat, "wall_s": wall_s,
                          "ok": all(r["status"] == "ok" for r in rows)})

    def results(self) -> tuple[list[dict], dict, dict, dict]:
        """(merged rows marked against default, outputs_match, why a workload's rows have no comparison, the
        best line per workload)."""
        rows = launcher.aggregate(self.rows)
        unmatched = launcher.against_default(rows)
        return rows, launcher.compare(self.rows), unmatched, launcher.best(rows)

    def document(self, complete: bool, interrupted: str | None = None, results: tuple | None = None) -> dict:
        """The JSON: complete (`results`: the run's), cut short by `interrupted` (compared so far), or a run
        still going (merged rows alone: the bootstrap would take CPU from the ranks of the next set)."""
        if results is None and (complete or interrupted):
            results = self.results()
        rows, match, _, lines = results or (launcher.aggregate(self.rows), None, None, None)
        if interrupted and lines:  # a best line from the sets run so far says so
            lines = {w: f"{line} (interrupted by {interrupted}: on the sets run so far)" for w, line in lines.items()}
        return {"provenance": self.prov, "config": json.loads(json.dumps(vars(self.cfg), default=lambda o: vars(o))),
                "complete": complete, "rows": rows, "not_applicable": self.skipped,
                "outputs_match": match if complete else None, "best": lines, "sets": self.sets,
                "wall_s": sum(s["wall_s"] for s in self.sets), "elapsed_s": time.monotonic() - self.started} \
            | ({"interrupted": interrupted} if interrupted else {})


def _chart(rows: list[dict], path: Path) -> Path | None:
    """The bar chart, or a warning: a picture that fails does not fail the run."""
    try:
        return bars(rows, path)
    except Exception as exc:  # noqa: BLE001 - any plotting failure is a warning
        warn(f"no chart {path}: {type(exc).__name__}: {exc}")
        return None


def _print(rows: list[dict], match: dict, unmatched: dict[str, str | None], lines: dict[str, str],
           skipped: list[dict], repeats: int) -> None:
    """One table per workload with its best line under it; `unmatched`: why a workload's rows have no comparison
    with default (None: they have); then the strategies not run here, once, and what the comparison covers."""
    for workload in dict.fromkeys(r["workload"] for r in rows):
        kind = BY_WORKLOAD[workload].rows
        verdict = match.get(workload, {})
        why = f"; {unmatched[workload]}" if unmatched.get(workload) else ""
        print_table(f"{workload}: outputs match: {'yes' if verdict.get('match') else 'NO'} "
                    f"({verdict.get('how', '-')}){why}",
                    list(kind.columns), [kind.table_row(r) for r in rows if r["workload"] == workload])
        print_text(lines[workload])
    if skipped:
        print_text("not run here: " + "; ".join(f"{s['strategy']} ({s['reason']})" for s in skipped))
    if rows:
        print_text(vs_default_note(repeats))
    else:
        print("ccoverlap bench: nothing ran: no selected strategy applies here", file=sys.stderr)
