"""The typed reader (issue 22) builds the same trace model as the streaming reader it replaced, on every trace
the repository records, and refuses what the old one refused."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import kineto_synth as ks
import trace_reference
from ccoverlap.analysis.model import Classifier, LeftOut
from ccoverlap.analysis.reader import read_trace
from ccoverlap.util.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
RECORDED = sorted(p for d in (ROOT / "tests" / "data", ROOT / "bench" / "results") for p in d.rglob("*")
                  if p.is_file() and p.name.endswith((".json", ".json.gz")) and "trace" in p.name)


def _read(reader, path: Path, classifier: Classifier):
    try:
        trace = reader(path, classifier)
    except UsageError as exc:
        return f"refused: {str(exc).split(' (')[0]}"
    # a recorded trace is all readable
    assert trace.left_out.events == trace.left_out.steps == trace.left_out.calls == 0, trace.left_out
    return dataclasses.replace(trace, left_out=LeftOut())


def test_the_recorded_traces_are_many():
    assert len(RECORDED) >= 20 and any(p.name.endswith(".gz") for p in RECORDED)


@pytest.mark.parametrize("path", RECORDED, ids=[str(p.relative_to(ROOT)) for p in RECORDED])
@pytest.mark.parametrize("regex", [None, "^comm_"])
def test_the_model_equals_the_old_readers(path, regex):
    classifier = Classifier.with_user_regex(regex)
    old, new = _read(trace_reference.read_trace, path, classifier), _read(read_trace, path, classifier)
    assert new == old


@pytest.mark.parametrize("seed", range(4))
def test_the_model_equals_the_old_readers_on_synthetic_runs(tmp_path, seed):
    """Float times, launch threads, sync records and cpu_ops with shapes, gzipped or not."""
    kernels, steps = ks.random_run(seed, 6, pad=4096 * (seed % 2), float_times=seed >= 2)
    path = ks.write(tmp_path / f"rank{seed}_trace.json{'.gz' if seed % 2 else ''}", seed, 4, kernels, steps,
                    cpu_noise=seed)
    assert _read(read_trace, path, Classifier()) == trace_reference.read_trace(path)
