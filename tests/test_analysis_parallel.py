"""`analyze` with worker processes gives what the single-process path gives (issue 22): every metric and every
communication kernel's wait, on every folder of recorded traces."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

import kineto_synth as ks
from ccoverlap.analysis import analyze
from ccoverlap.util.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = sorted({p.parent for d in (ROOT / "tests" / "data", ROOT / "bench" / "results") for p in d.rglob("*")
                  if p.is_file() and p.name.endswith((".json", ".json.gz")) and "trace" in p.name})


def close(a, b) -> bool:
    """Equal, numbers within 1e-6 relative, through dicts and lists."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float | int):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    return a == b


def outcome(folder: Path, jobs: int):
    try:
        result = analyze(folder, jobs=jobs, keep_traces=False)
    except UsageError as exc:
        return str(exc)
    return ([r.to_dict() for r in result.ranks], [str(p) for p in result.problems], result.missing_ranks,
            {k: m.to_dict() for k, m in result.alone.items()}, result.files)


def test_the_folders_are_many():
    assert len(FOLDERS) >= 10


@pytest.mark.parametrize("folder", FOLDERS, ids=[str(f.relative_to(ROOT)) for f in FOLDERS])
def test_workers_give_the_single_process_answers(folder):
    one, two = outcome(folder, 1), outcome(folder, 2)
    assert close(two, one)


def test_workers_on_a_run_of_many_ranks_with_skew(tmp_path):
    """Eight ranks, collectives started at different times on each: skew crosses the workers."""
    for rank in range(8):
        kernels, steps = ks.random_run(rank, 5)
        for k in kernels:
            k.ts += 3.0 * rank if "nccl" in k.name else 0.0
        ks.write(tmp_path / f"rank{rank}_trace.json", rank, 8, kernels, steps)
    one, two = outcome(tmp_path, 1), outcome(tmp_path, 3)
    assert len(one[0]) == 8 and any(c["skew_us"] > 0 for r in one[0] for c in r["comm_kernels"])
    assert close(two, one)


def test_progress_lines_say_files_done_and_mb_per_s_off_a_terminal(capsys, monkeypatch):
    from ccoverlap.cli import main
    from ccoverlap.util import output

    monkeypatch.setattr(output.Progress, "LINE_EVERY_S", 0.0)
    code = main(["analyze", str(ROOT / "tests" / "data" / "traces" / "h200" / "default"), "--json", "-", "--jobs", "2"])
    err = capsys.readouterr().err
    assert code == 0 and "analyze: 2/2 done" in err and re.search(r"\d+ MB at \d+ MB/s", err)


@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_jobs_below_one_is_a_one_line_error(capsys, jobs):
    from ccoverlap.cli import main

    code = main(["analyze", str(ROOT / "tests" / "data" / "traces" / "h200" / "default"), "--jobs", jobs])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == f"ccoverlap analyze: error: --jobs {jobs}: valid 1 or more"


@pytest.mark.parametrize("folder", FOLDERS, ids=[str(f.relative_to(ROOT)) for f in FOLDERS])
def test_a_file_on_two_cores_gives_the_single_process_answers(folder, monkeypatch):
    """Two cores a file (jobs twice the files), forced at any size: each file's events read in two processes,
    and its trace-only part (the steps' shapes, the metrics of its times) beside the rest of its first pass:
    the very answers, not only close ones."""
    from ccoverlap import analysis
    from ccoverlap.analysis import reader

    monkeypatch.setattr(reader, "SPLIT_BYTES", 0)
    monkeypatch.setattr(analysis, "AHEAD_KERNELS", 0)
    files = sum(1 for p in folder.rglob("*") if p.name.endswith((".json", ".json.gz")))
    assert outcome(folder, 2 * max(files, 1)) == outcome(folder, 1)
