"""A property of `analyze` on damaged input (issue 32.8): a real two-rank capture (tests/data) mutated by
hypothesis (fields dropped, values nulled or mistyped, huge or negative times, files truncated, a rank
duplicated) never ends in a traceback or a hang, and either is a one-line error (exit 2) or analyses what it
could read: each rank it analyses gets the very rows the unmutated traces of the same ranks give (the loss of
the device properties aside, which is named), and each file it does not analyse is named."""
from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import tempfile
from functools import cache
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from ccoverlap.cli import main

CAPTURE = Path(__file__).parent / "data" / "traces" / "h200" / "default"
NAMES = ("rank0_trace.json.gz", "rank1_trace.json.gz")
DOCS = {name: json.loads(gzip.decompress((CAPTURE / name).read_bytes())) for name in NAMES}
GPU_CATS = ("kernel", "gpu_memset", "gpu_memcpy")
#: What a damaged value may be: nothing, the wrong type, a time no run has.
VALUES = st.sampled_from([None, "x", "17", True, False, [], {}, 1e30, -1e30, 1e18, -1, 0, 2 ** 70, 0.5])
FIELDS = {
    "gpu": ["ts", "dur", "name", "ph", "cat", "args", "args.stream", "args.correlation", "args.grid", "args.block",
            "args.registers per thread", "args.shared memory", "args.device"],
    "call": ["ts", "dur", "args.correlation", "args"],
    "step": ["ts", "dur", "name"],
    "meta": ["distributedInfo.rank", "distributedInfo.world_size", "distributedInfo", "deviceProperties.0.numSms",
             "deviceProperties.0.sharedMemPerMultiprocessor", "deviceProperties"],
}
#: The time metrics, which the device properties do not touch (the causes and the verdict may: unknown GPU).
TIMES = ("kernels", "span_us", "compute_us", "communication_us", "memory_us", "overlap_us", "exposed_comm_us",
         "idle_us", "comp_comm_overlap_pct", "comm_kernel_count", "step_count")


def _names(line: str, name: str) -> bool:
    """Whether a note names the file: alone (`.../cap/NAME: ...`) or among the files of one kind
    (`N files in .../cap: A, B: ...`, analysis.reader.grouped)."""
    if f"/cap/{name}: " in line:
        return True
    _, found, rest = line.partition("/cap: ")
    return bool(found) and name in rest.split(": ", 1)[0].split(", ")


def _targets(doc: dict, kind: str) -> list[dict]:
    events = doc["traceEvents"]
    if kind == "gpu":
        return [e for e in events if e.get("cat") in GPU_CATS]
    if kind == "call":
        return [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    if kind == "step":
        return [e for e in events if str(e.get("name", "")).startswith("ProfilerStep")]
    return [doc]


def _apply(target, path: str, drop: bool, value) -> None:
    *parents, last = path.split(".")
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target.get(key)
        if not isinstance(target, (dict, list)):
            return
    if isinstance(target, list):
        return
    if drop:
        target.pop(last, None)
    elif last in ("name", "cat") and isinstance(value, str) or last == "correlation" and type(value) is int:
        target[last] = None  # other text, or another id, is another event, not a damaged one (no reader can tell)
    else:
        target[last] = value


field_edit = st.tuples(st.sampled_from(NAMES), st.sampled_from(sorted(FIELDS)), st.integers(0, 10 ** 6),
                       st.integers(0, 50), st.booleans(), VALUES)
mutation = st.one_of(
    st.tuples(st.just("edit"), field_edit),
    st.tuples(st.just("truncate"), st.tuples(st.sampled_from(NAMES), st.floats(0.0, 0.999), st.booleans())),
    st.tuples(st.just("duplicate"), st.tuples(st.sampled_from(NAMES))),
)


def _write(folder: Path, docs: dict[str, dict], cuts: dict[str, tuple[float, bool]], copies: dict[str, str]) -> None:
    for name, doc in docs.items():
        text = json.dumps(doc).encode()
        cut, in_gzip = cuts.get(name, (None, False))
        if cut is not None and not in_gzip:
            text = text[: int(len(text) * cut)]
        data = gzip.compress(text, mtime=0)
        if cut is not None and in_gzip:
            data = data[: int(len(data) * cut)]
        (folder / name).write_bytes(data)
    for name, source in copies.items():  # the recorded file again: its rank twice
        (folder / name).write_bytes((CAPTURE / source).read_bytes())


def _run(folder: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["analyze", str(folder), "--json", "-", "--jobs", "1"])
    return code, out.getvalue(), err.getvalue()


@cache
def _expected(files: tuple[tuple[str, str], ...]) -> dict[str, dict]:
    """file name -> its row, from the unmutated traces of `files` (name, the original it holds)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "cap"
        folder.mkdir()
        for name, source in files:
            (folder / name).write_bytes((CAPTURE / source).read_bytes())
        code, out, _ = _run(folder)
    assert code == 0
    return {Path(r["file"]).name: _row(r) for r in json.loads(out)["ranks"]}


def _row(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ("file", "rank")}


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=3))
def test_a_mutated_capture_is_a_one_line_error_or_the_same_rows_with_the_loss_named(mutations):
    docs = copy.deepcopy(DOCS)
    cuts: dict[str, tuple[float, bool]] = {}
    copies: dict[str, str] = {}
    for kind, args in mutations:
        if kind == "edit":
            name, what, index, field_index, drop, value = args
            targets = _targets(docs[name], what)
            fields = FIELDS[what]
            _apply(targets[index % len(targets)], fields[field_index % len(fields)], drop, value)
        elif kind == "truncate":
            name, cut, in_gzip = args
            cuts[name] = (cut, in_gzip)
        else:
            (source,) = args
            copies[f"rank{2 + len(copies)}_trace.json.gz"] = source
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "cap"
        folder.mkdir()
        _write(folder, docs, cuts, copies)
        written = {p.name: p.read_bytes() for p in folder.iterdir()}
        code, out, err = _run(folder)
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == written  # the input unchanged
    lines = err.splitlines()
    assert "Traceback" not in err and all(line.startswith("ccoverlap analyze: ") for line in lines), err
    if code != 0:
        assert code == 2 and out == "" and lines[-1].startswith("ccoverlap analyze: error: "), (code, err)
        return
    rows = {Path(r["file"]).name: _row(r) for r in json.loads(out)["ranks"]}
    said = {name: [line for line in lines if _names(line, name)] for name in written}
    for name in written:
        if name not in rows:
            assert said[name], f"{name} not analysed, and not said why: {err}"
    sources = tuple(sorted((name, copies.get(name, name)) for name in rows))
    expected = _expected(sources)
    for name, row in rows.items():
        if any("deviceProperties" in line for line in said[name]):  # the GPU unknown, named: the times still hold
            assert {k: row[k] for k in TIMES} == {k: expected[name][k] for k in TIMES}, said[name]
        else:
            assert row == expected[name], (name, said[name], mutations)
