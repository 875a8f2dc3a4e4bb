"""`analyze` on input that is not what it should be (issues 29 and 32): what the reader cannot read is left out,
counted and named; a rank with too much left out gets no verdict; special files are never opened; a trace past
the decompressed-size limit is stopped there; a worker that dies names its file and the signal. Each case: the
one line, the exit code, no traceback, and the input's bytes unchanged."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

import kineto_synth as ks
from ccoverlap.analysis import parallel, reader
from ccoverlap.analysis.model import LEFT_OUT_SHARE
from ccoverlap.analysis.reader import read_trace
from ccoverlap.cli import main
from ccoverlap.util.errors import UsageError

CAPTURE = Path(__file__).parent / "data" / "traces" / "h200" / "default"  # two ranks, recorded on an H200


def analyze(capsys, *argv) -> tuple[int, str, list[str]]:
    code = main(["analyze", *map(str, argv)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err.splitlines()


def capture(tmp_path: Path, edit=None, rank: int = 0) -> tuple[Path, Path]:
    """The recorded capture copied to tmp_path/cap, rank `rank`'s trace rewritten by `edit(doc)` (in place)."""
    folder = tmp_path / "cap"
    shutil.copytree(CAPTURE, folder)
    path = folder / f"rank{rank}_trace.json.gz"
    if edit is not None:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        edit(doc)
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return folder, path


def nccl(doc: dict) -> dict:
    return next(e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("ncclDev"))


def rank_line(lines: list[str], path: Path) -> list[str]:
    return [line for line in lines if line.startswith(f"ccoverlap analyze: {path}: ")]


@pytest.mark.parametrize(("edit", "why"), [
    (lambda d: nccl(d).update(args=None), "without a stream (args null or missing)"),
    (lambda d: nccl(d)["args"].update(stream="17"), "whose stream is not a non-negative integer ('17')"),
    (lambda d: nccl(d)["args"].update(correlation="x"), "whose correlation is not an integer ('x')"),
    (lambda d: nccl(d)["args"].update(grid="x"), "whose launch shape (block, grid, registers, shared memory) cannot "
                                                 "be read"),
    (lambda d: nccl(d).update(ts=1e30), "that start more than 1 h from the rank's other GPU events"),
    (lambda d: nccl(d).update(dur=-3), "with a negative dur"),
    (lambda d: nccl(d).pop("dur"), "that are not complete events (ph 'X' with a dur)"),
], ids=["args-null", "stream-text", "correlation-text", "grid-text", "ts-1e30", "dur-negative", "dur-missing"])
def test_an_unreadable_kernel_is_left_out_named_and_its_rank_gets_no_verdict(capsys, tmp_path, edit, why):
    """Without the check, a capture whose all-reduce cannot be read printed a verdict without it (exit 0)."""
    folder, path = capture(tmp_path, edit)
    before = path.read_bytes()
    code, out, lines = analyze(capsys, folder, "--json", "-")
    mine = rank_line(lines, path)
    assert any(line.startswith(f"ccoverlap analyze: {path}: left out: 1 GPU event(s) {why} (first: 'ncclDev")
               for line in mine), mine
    assert mine[-1].startswith(f"ccoverlap analyze: {path}: skipped, no verdict: 1 of ") and "more than 1%" in mine[-1]
    data = json.loads(out)
    assert code == 0 and [r["rank"] for r in data["ranks"]] == [1] and data["missing_ranks"] == {"cap": [0]}
    assert path.read_bytes() == before


def test_no_rank_left_is_exit_2_with_the_reason(capsys, tmp_path):
    folder, _ = capture(tmp_path, lambda d: nccl(d).update(args=None))
    (folder / "rank1_trace.json.gz").unlink()
    code, out, lines = analyze(capsys, folder)
    assert code == 2 and out == ""
    assert ("skipped, no verdict" in lines[-2]
            and lines[-1] == f"ccoverlap analyze: error: nothing could be analysed in {folder}")


def test_a_loss_under_the_share_is_named_and_the_verdict_kept(tmp_path):
    """One unreadable event in more than 1/LEFT_OUT_SHARE: named, and the rank keeps its verdict."""
    kernels, steps = ks.random_run(1, 40)
    path = ks.write(tmp_path / "rank0_trace.json", 0, 1, kernels, steps)
    doc = json.loads(path.read_text())
    short = min((e for e in doc["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["dur"])
    short["args"]["stream"] = None
    path.write_text(json.dumps(doc))
    t = read_trace(path)
    assert len(t.kernels) + 1 > 1 / LEFT_OUT_SHARE and t.left_out.events == 1 and t.left_out.withheld() is None
    assert [n for n in t.notes if n.startswith("left out: 1 GPU event(s) without a stream")]


@pytest.mark.parametrize(("info", "why"), [
    ({"rank": -1, "world_size": 2}, "rank -1 out of range (valid 0-1: world size 2)"),
    ({"rank": 7, "world_size": 2}, "rank 7 out of range (valid 0-1: world size 2)"),
])
def test_a_rank_out_of_range_is_skipped_named(capsys, tmp_path, info, why):
    folder, path = capture(tmp_path, lambda d: d["distributedInfo"].update(info))
    code, out, lines = analyze(capsys, folder)
    assert code == 0 and f"ccoverlap analyze: {path}: skipped: {why}" in lines


def test_a_boolean_rank_or_world_size_is_not_taken(tmp_path):
    folder, path = capture(tmp_path, lambda d: d["distributedInfo"].update(rank=True, world_size=False))
    t = read_trace(path)
    assert t.rank == 0 and t.world_size is None  # rank from the file name; False is no world size
    assert "distributedInfo world_size False ignored (valid 1-1048576)" in t.notes


@pytest.mark.parametrize("value", [0, -4, "132", None, 10 ** 9])
def test_absurd_device_properties_are_left_out_for_every_consumer(capsys, tmp_path, value):
    """numSms 0 ended in an AssertionError in analyze and a ZeroDivisionError in whatif: the reader leaves the
    entry out (the GPU unknown), named, so no consumer sees it."""
    def edit(doc):
        for p in doc["deviceProperties"]:
            p["numSms"] = value

    folder, path = capture(tmp_path, edit)
    t = read_trace(path)
    assert t.device is None
    assert f"left out: deviceProperties numSms {value!r} (valid 1-4096): the GPU is unknown (what its SMs hold is " \
           "unknown)" in t.notes
    code, out, lines = analyze(capsys, folder)
    assert code == 0 and "verdict cap: " in out


def test_missing_device_properties_are_named(tmp_path):
    folder, path = capture(tmp_path, lambda d: d.pop("deviceProperties"))
    assert "no deviceProperties: the GPU is unknown (what its SMs hold is unknown)" in read_trace(path).notes


def test_whatif_on_a_capture_with_numsms_zero_ends_without_a_traceback(capsys, tmp_path):
    from ccoverlap.util.tracefiles import alone_trace
    from test_analysis_doctor import NCCL as NCCL_ARGS, alone_window

    kernels = [ks.K("compute_a", 100, 50, launch_ts=90), ks.K(ks.NCCL, 120, 300, launch_ts=100, **NCCL_ARGS),
               ks.K("compute_a", 160, 500, launch_ts=110)]
    path = ks.write(tmp_path / "cap" / "rank0_trace.json", 0, 1, kernels, [])
    ks.write(alone_trace(path), 0, 1, alone_window(kernels, [45, 250, 480]), [])
    for p in (path, alone_trace(path)):
        doc = json.loads(gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes())
        for props in doc["deviceProperties"]:
            props["numSms"] = 0
        text = json.dumps(doc).encode()
        p.write_bytes(gzip.compress(text) if p.name.endswith(".gz") else text)
    code = main(["whatif", str(tmp_path / "cap"), "--json", "-"])
    out, err = capsys.readouterr()
    assert code in (0, 2) and "Traceback" not in err and (code == 2) == bool(err.strip())


def test_a_zero_length_kernel_in_the_alone_window_is_left_out_not_a_traceback(capsys, tmp_path):
    """CUPTI records 0 ns kernels: whatif raised `alone time 0.0 us must be > 0`. The reader leaves it out, so
    its launch's time alone is unknown (not matched), said."""
    from ccoverlap.util.tracefiles import alone_trace
    from test_analysis_doctor import NCCL as NCCL_ARGS, alone_window

    kernels = [ks.K("compute_a", 100, 50, launch_ts=90), ks.K(ks.NCCL, 120, 300, launch_ts=100, **NCCL_ARGS),
               ks.K("compute_a", 160, 500, launch_ts=110)]
    path = ks.write(tmp_path / "cap" / "rank0_trace.json", 0, 1, kernels, [])
    ks.write(alone_trace(path), 0, 1, alone_window(kernels, [0, 250, 480]), [])
    code = main(["whatif", str(tmp_path / "cap"), "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err and json.loads(out)["validation"]["simulated_default_us"] > 0
    code, _, lines = analyze(capsys, tmp_path / "cap")
    assert code == 0 and any("alone window: left out: 1 GPU event(s) with a zero dur" in line for line in lines)


def test_a_corrupt_alone_window_names_the_file_and_what_is_wrong(capsys, tmp_path):
    from ccoverlap.util.tracefiles import alone_trace

    kernels, steps = ks.random_run(2, 3)
    path = ks.write(tmp_path / "cap" / "rank0_trace.json", 0, 1, kernels, steps)
    alone = alone_trace(path)
    alone.write_bytes(b"\x1f\x8b not gzip at all")
    code, _, lines = analyze(capsys, tmp_path / "cap")
    assert code == 0 and f"ccoverlap analyze: {alone}: alone window skipped: truncated or corrupt gzip " \
                          "(Unknown compression method)" in lines
    assert main(["whatif", str(tmp_path / "cap")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ccoverlap whatif: error: {alone}: alone window skipped: truncated or corrupt gzip")
    assert "\n" not in err and "no alone window matched" not in err


# --- files that are not trace files: never opened, never a hang ---


@pytest.mark.parametrize(("make", "what"), [
    (lambda p: os.mkfifo(p), "a FIFO"),
    (lambda p: p.symlink_to("/dev/zero"), "a character device"),  # read, it would never end
    (lambda p: p.mkdir(), "a directory"),
], ids=["fifo", "device", "directory"])
def test_a_special_file_named_as_a_trace_is_left_out_unopened(capsys, tmp_path, no_hang, make, what):
    folder, _ = capture(tmp_path)
    special = folder / "rank1_trace.json.gz"
    special.unlink()
    make(special)
    code, out, lines = analyze(capsys, folder)
    assert code == 0 and f"ccoverlap analyze: {special}: skipped: {what}, not a trace file" in lines
    assert "verdict cap: " in out


@pytest.mark.parametrize("name", ["rank0_steps.jsonl", "interposer-7.stats"])
def test_a_fifo_named_like_a_doctor_record_is_left_out_unopened(capsys, tmp_path, no_hang, name):
    """The doctor's step records and the interposer's stats beside the traces are read too (analyze and whatif
    on a doctor folder): a FIFO named like one is said and left out, never waited on."""
    from ccoverlap.doctor import record

    folder, _ = capture(tmp_path)
    lines = [{"format": record.FORMAT, "rank": 0, "pid": 7},
             {"window": "open", "cuda": True, "trace": "rank0_trace.json.gz", "t": 1.0},
             {"window": "closed", "trace": "rank0_trace.json.gz", "recorded": 3, "complete": True, "t": 2.0}]
    (folder / "rank0_steps.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (folder / name).unlink(missing_ok=True)
    os.mkfifo(folder / name)  # the record itself, or the stats of the process it names (pid 7)
    code, out, lines = analyze(capsys, folder)
    assert code == 0 and "verdict cap: " in out
    said = f"ccoverlap analyze: {folder / name}: a FIFO, not a ccoverlap doctor step record: left out"
    assert any(line.startswith(said) for line in lines) == name.endswith(".jsonl")
    main(["whatif", str(folder), "--lever", "priority"])  # whatever it concludes of this capture, at once
    err = capsys.readouterr().err
    assert "Traceback" not in err and ("a FIFO, not a ccoverlap doctor step record" in err) == name.endswith(".jsonl")

def test_a_fifo_as_the_folder_is_one_line(capsys, tmp_path, no_hang):
    os.mkfifo(tmp_path / "f")
    code, _, lines = analyze(capsys, tmp_path / "f")
    assert code == 2 and lines == [f"ccoverlap analyze: error: {tmp_path / 'f'} is not a directory or a trace file "
                                   "(*.json, *.json.gz)"]


def test_a_file_that_changes_while_read_is_refused(tmp_path, monkeypatch):
    """The second look at the open file (after reading it) sees it larger: a trace still being written."""
    _, path = capture(tmp_path)
    real, calls = os.fstat, []

    def fstat(fd):
        st = real(fd)
        calls.append(fd)
        if len(calls) == 2:
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid,
                                   st.st_size + 4096, st.st_atime, st.st_mtime, st.st_ctime))
        return st

    monkeypatch.setattr(reader.os, "fstat", fstat)
    with pytest.raises(UsageError, match=r"^changed while it was read \(\d+ -> \d+ bytes\): read it once it is "
                                         "complete$"):
        read_trace(path)


def _denied(monkeypatch, denied: Path, call: str) -> None:
    """os.`call` on `denied` fails with EACCES, as for a user without the permission (tests run as root here,
    whom chmod does not stop)."""
    real = getattr(os, call)

    def fake(path, *a, **kw):
        if Path(os.fsdecode(path)) == denied:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(reader.os, call, fake)


def test_an_unreadable_subfolder_is_left_out_named(capsys, tmp_path, monkeypatch):
    capture(tmp_path)
    shutil.copytree(CAPTURE, tmp_path / "other")
    if os.geteuid() == 0:
        _denied(monkeypatch, tmp_path / "other", "scandir")
    else:
        (tmp_path / "other").chmod(0)
    try:
        code, out, lines = analyze(capsys, tmp_path)
    finally:
        (tmp_path / "other").chmod(0o755)
    assert code == 0 and (f"ccoverlap analyze: {tmp_path / 'other'}: left out: "
                          "cannot list it (Permission denied)" in lines)
    assert "verdict cap: " in out and "verdict other" not in out


def test_an_unreadable_folder_is_one_line(capsys, tmp_path, monkeypatch):
    folder, _ = capture(tmp_path)
    _denied(monkeypatch, folder, "scandir")
    code, _, lines = analyze(capsys, folder)
    assert code == 2 and lines == [f"ccoverlap analyze: error: {folder}: cannot list it (Permission denied)"]


def test_a_trace_in_a_folder_without_x_is_left_out_named(capsys, tmp_path, monkeypatch):
    """Without x on its folder a file cannot even be examined: its stat fails."""
    folder, path = capture(tmp_path)
    _denied(monkeypatch, path, "stat")
    code, _, lines = analyze(capsys, folder)
    assert code == 0 and f"ccoverlap analyze: {path}: skipped: cannot read (Permission denied)" in lines


def test_names_that_are_not_utf8_print_and_draw(capsys, tmp_path):
    """A folder and a trace named in Latin-1 bytes: every line and the JSON encode as UTF-8 (the raw names
    ended in a UnicodeEncodeError on stderr and a TypeError in the report's plots)."""
    weird = Path(os.fsdecode(bytes(tmp_path) + b"/r\xffx"))
    weird.mkdir()
    shutil.copy(CAPTURE / "rank0_trace.json.gz", Path(os.fsdecode(os.fsencode(weird) + b"/rank0_\xfe.json.gz")))
    code = main(["analyze", str(tmp_path), "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err
    out.encode("utf-8"), err.encode("utf-8")  # no lone surrogates
    data = json.loads(out)
    assert (data["ranks"][0]["strategy"] == "r\\xffx"
            and data["ranks"][0]["file"].endswith("r\\xffx/rank0_\\xfe.json.gz"))
    report = tmp_path.parent / f"{tmp_path.name}-r.html"  # outside the input folder (check_outputs refuses inside)
    assert main(["analyze", str(tmp_path), "--report", str(report)]) == 0
    assert "r\\xffx" in report.read_text(encoding="utf-8")


# --- the decompressed-size limit ---

def _bomb(path: Path, mb: int) -> Path:
    """A valid trace whose traceEvents are `mb` MB of whitespace: a few kB compressed."""
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents": [')
        for _ in range(mb):
            fh.write(b" " * 1_000_000)
        fh.write(b"]}")
    return path


def test_a_trace_past_the_decompressed_limit_is_stopped_there_and_named(capsys, tmp_path, monkeypatch):
    folder, _ = capture(tmp_path)
    bomb = _bomb(folder / "rank1_trace.json.gz", 40)
    before = bomb.read_bytes()
    inflated = []
    real = gzip.GzipFile.read

    def read(self, n=-1):
        chunk = real(self, n)
        inflated.append(len(chunk))
        return chunk

    monkeypatch.setattr(gzip.GzipFile, "read", read)
    code, out, lines = analyze(capsys, folder, "--max-trace-mb", "8")
    size = bomb.stat().st_size / 1e3
    assert code == 0 and "verdict cap: " in out
    assert f"ccoverlap analyze: {bomb}: skipped: {size:.1f} kB compressed, more than 8.4 MB decompressed: past the " \
           "limit of 8 MB decompressed (a quarter of the memory available per worker; " \
           "--max-trace-mb MB sets it)" in lines
    assert sum(inflated) <= 8e6 + 2 * (1 << 20)  # stopped at the limit: not 40 MB inflated
    assert bomb.read_bytes() == before


def test_a_plain_trace_past_the_limit_is_not_read(tmp_path, monkeypatch):
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(b'{"traceEvents": [' + b" " * 3_000_000 + b"]}")
    with pytest.raises(UsageError,
                       match=r"^3\.0 MB: past the limit of 2 MB decompressed .*--max-trace-mb MB sets it\)$"):
        read_trace(path, limit=2_000_000)


def test_the_default_limit_is_a_share_of_the_memory_per_worker(monkeypatch):
    assert reader.trace_limit(4, 5.0) == 5_000_000
    monkeypatch.setattr(reader, "open", lambda *a, **k: __import__("io").BytesIO(b"MemAvailable: 16777216 kB\n"),
                        raising=False)
    assert (reader.trace_limit(1) == 4 << 30 and reader.trace_limit(8) == 512 << 20
            and reader.trace_limit(1000) == 64 << 20)


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_bad_limit_is_one_line(capsys, value):
    code, _, lines = analyze(capsys, CAPTURE, "--max-trace-mb", value)
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"ccoverlap analyze: error: --max-trace-mb {value}")


# --- worker processes ---

def _dies(task):
    if task == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return task * 10


def _terminated(task):
    if task == 1:
        os.kill(os.getpid(), signal.SIGTERM)
    return task


def test_a_worker_killed_names_its_task_and_the_signal():
    assert parallel.run(_dies, [0, 1, 3], 2) == [0, 10, 30]
    with pytest.raises(parallel.WorkerDied) as got:
        parallel.run(_dies, [0, 1, 2, 3], 2)
    assert got.value.task == 2 and got.value.why == "killed by SIGKILL"
    with pytest.raises(parallel.WorkerDied, match="killed by SIGTERM"):
        parallel.run(_terminated, [0, 1], 2)


def test_analyze_with_a_worker_killed_is_one_line_and_writes_nothing(capsys, tmp_path, monkeypatch):
    import ccoverlap.analysis as analysis

    folder, victim = capture(tmp_path)
    real = analysis.first

    def first(task):
        if task.path == victim:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(task)

    monkeypatch.setattr(analysis, "first", first)
    code, out, lines = analyze(capsys, folder, "--jobs", "2", "--json", "-")
    assert code == 2 and out == ""
    assert lines[-1] == f"ccoverlap analyze: error: a worker process died reading {victim}: killed by SIGKILL; " \
                        "nothing was written"


def _sleeps(pids: Path):
    def work(task):
        (pids / str(os.getpid())).touch()
        time.sleep(60)
    return work


def test_ctrl_c_stops_every_worker(tmp_path):
    main_pid = os.getpid()

    def interrupt():
        for _ in range(400):
            if len(list(tmp_path.iterdir())) == 2:
                break
            time.sleep(0.05)
        os.kill(main_pid, signal.SIGINT)

    # Python's Ctrl-C handler, which it does not install when started with SIGINT ignored (as a background job
    # of a non-interactive shell starts: pytest run so failed this test after 2 minutes, the signal ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            parallel.run(_sleeps(tmp_path), [0, 1, 2], 2)
    finally:
        signal.signal(signal.SIGINT, previous)
    pids = [int(p.name) for p in tmp_path.iterdir()]
    assert len(pids) == 2
    for pid in pids:  # ended and reaped
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_worker_error_is_raised_in_the_parent():
    """Whichever worker fails first, its error (two workers: either may)."""

    def boom(task):
        raise ValueError(f"bad {task}")

    with pytest.raises(ValueError, match=r"^bad [01]$"):
        parallel.run(boom, [0, 1], 2)
