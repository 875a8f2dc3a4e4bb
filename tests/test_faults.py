"""`ccoverlap doctor` and `ccoverlap tune` when the world is not kind: a full disk under --out, a reader that
closes stdout, a trial that never ends, two outputs on one path, a device file as output, concurrent writers.
Each says one line, with the right exit code, and leaves nothing half-written. CPU only: the runs start side
by side in one fixture (the 2 cores mostly wait on imports)."""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_interposer import clean_env

from ccoverlap.cli import main
from ccoverlap.util import output

TRAIN = str(Path(__file__).parent / "data" / "doctor_train.py")


def _full_disk() -> None:
    """In the child: every file holds 64 bytes at most, as on a disk that is all but full (a write past them
    fails with EFBIG: Python ignores SIGXFSZ). Room enough for tempfile's probe, so torch still imports."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))


#: name -> (argv after `ccoverlap`, with {tmp}; a full disk; stdout closed at once)
RUNS = {
    "doctor_full": (["doctor", "--skip", "2", "--steps", "2", "--out", "{tmp}/out", "--", sys.executable, TRAIN],
                    True, False),
    "doctor_head": (["doctor", "--skip", "2", "--steps", "2", "--out", "{tmp}/out", "--json", "{tmp}/d.json", "--",
                     "sh", "-c", f'"{sys.executable}" "{TRAIN}" > /dev/null'], False, True),  # the doctor's lines only
    "doctor_json_full": (["doctor", "--skip", "2", "--steps", "2", "--out", "{tmp}/out", "--json", "/dev/full", "--",
                          sys.executable, TRAIN], False, False),
    "tune_full": (["tune", "--budget", "1", "--skip", "2", "--steps", "3", "--out", "{tmp}/out", "--",
                   sys.executable, TRAIN, "--steps", "100"], True, False),
    "tune_timeout": (["tune", "--budget", "2", "--trial-timeout", "3", "--out", "{tmp}/out", "--", "sleep", "1000"],
                     False, False),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[int, str, str, Path]]:
    """name -> (exit code, stdout, stderr, its folder), every run of RUNS started at once."""
    pytest.importorskip("torch")
    started = {}
    for name, (argv, full, head) in RUNS.items():
        tmp = tmp_path_factory.mktemp(name)
        cmd = [sys.executable, "-m", "ccoverlap", *(a.format(tmp=tmp) for a in argv)]
        started[name] = tmp, head, subprocess.Popen(cmd, env=clean_env(), text=True, stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE, preexec_fn=_full_disk if full else None)
    done = {}
    for name, (tmp, head, proc) in started.items():
        if head:  # `| head -0`: the pipe closed before the doctor's first line (a line read first would race
            proc.stdout.close()  # its last write: all of it may fit in the pipe before the reader leaves)
            err = proc.stderr.read()
            done[name] = proc.wait(timeout=300), "", err, tmp
        else:
            out, err = proc.communicate(timeout=300)
            done[name] = proc.returncode, out, err, tmp
    return done


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_doctor_on_a_full_disk_says_so_and_leaves_no_empty_file(runs):
    code, _, err, tmp = runs["doctor_full"]
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err, err
    assert lines[-1] == (f"ccoverlap doctor: error: nothing was recorded: --out {tmp / 'out'}: "
                         "cannot write (File too large)")
    assert _files(tmp) == []  # no 0-byte steps file (the empty --out it made is gone too)


def test_doctor_with_a_closed_stdout_writes_its_json_and_says_so_in_one_line(runs):
    code, _, err, tmp = runs["doctor_head"]
    assert code == 1
    errors = [line for line in err.splitlines() if "error" in line]  # (the profiler's own USDT lines may be there)
    assert "Traceback" not in err and errors == [
        "ccoverlap doctor: error: cannot write standard output: [Errno 32] Broken pipe (EPIPE)"], err
    doc = json.loads((tmp / "d.json").read_text())
    assert doc["exit_code"] == 0 and doc["step_times"] and doc["analysis"] is None
    assert doc["no_analysis"] == "the program ran on the CPU (no GPU kernels in its traces)"


def test_doctor_whose_json_alone_cannot_be_written_is_the_one_output_line_exit_1(runs):
    """It was exit 2, a line of its own wording without the errno's name, as if nothing had been profiled."""
    code, out, err, tmp = runs["doctor_json_full"]
    errors = [line for line in err.splitlines() if "error" in line]
    assert code == 1 and "Traceback" not in err and errors == [
        "ccoverlap doctor: error: cannot write /dev/full: [Errno 28] No space left on device (ENOSPC)"], err
    assert "step times per rank" in out and (tmp / "out" / "rank0_trace.json.gz").is_file()  # said, and kept


def test_tune_on_a_full_disk_is_one_line_exit_2_and_leaves_nothing(runs):
    code, _, err, tmp = runs["tune_full"]
    assert code == 2 and "Traceback" not in err and "fails under the default" not in err, err
    assert err.strip().splitlines()[-1].endswith("cannot write a trial's record: File too large")
    assert _files(tmp) == []


def test_a_trial_timeout_stops_the_first_trial_and_says_so(runs):
    code, _, err, _ = runs["tune_timeout"]
    assert code == 2 and err.strip().splitlines()[-1] == (
        "ccoverlap tune: error: --trial-timeout 3 s: the command ran that long under the default without making "
        "--skip 10 + --steps 20 optimizer steps (give a larger --trial-timeout, or fewer steps)")


@pytest.mark.parametrize(("argv", "message"), [
    (["tune", "--json", "{f}", "--policy-out", "{f}"], "--json and --policy-out are both {f}: give each its own file"),
    (["tune", "--json", "{d}/t.json", "--policy-out", "{d}/t.png"], "--policy-out and --json's chart are both"),
    (["doctor", "--json", "{f}", "--report", "{f}"], "--json and --report are both {f}: give each its own file"),
])
def test_two_outputs_on_one_path_are_refused_before_any_work(argv, message, tmp_path, capsys):
    f = tmp_path / "x.json"
    argv = [a.format(f=f, d=tmp_path) for a in argv]
    assert main([*argv[:1], "--out", str(tmp_path / "out"), *argv[1:], "--", "true"]) == 2
    err = capsys.readouterr().err
    assert message.format(f=f) in err and err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_write_json_writes_a_device_or_fifo_in_place(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    output.write_json(fifo, {"a": 1})
    reader.join(10)
    assert got == ['{"a":1}\n'] and fifo.is_fifo() and [p.name for p in tmp_path.iterdir()] == ["fifo"]
    output.check_output(fifo, "--json")  # a FIFO is a place to write, not a file to refuse


def test_concurrent_writers_each_write_a_whole_file(tmp_path):
    path, failures = tmp_path / "r.json", []

    def write(n: int) -> None:
        for i in range(40):
            try:
                output.write_json(path, {"writer": n, "i": i, "pad": "x" * 4096})
            except OSError as exc:
                failures.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [] and json.loads(path.read_text())["i"] == 39
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~output._UMASK)  # as open() makes it


DEEP = "[" * 100_000 + "]" * 100_000
HUGE = "9" * 5000


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "--config", "{deep}", "--", "true"], "{deep}: nested too deeply to be a policy file"),
    (["run", "--config", "{huge}", "--", "true"], "{huge}: a number of 5000 digits (at most 100)"),
    (["run", "--strategy", f"nccl-ctas={HUGE}", "--", "true"],
     "nccl-ctas=999999999999999999999999999999999999999…: valid 1..64"),
    (["levers", "--strategy", f"nccl-ctas={HUGE}"], "valid 1..64"),
    (["bench", "--device", "cpu", "--strategies", f"priority+nccl-threads={HUGE}"], "valid 64..512 in steps of 32"),
], ids=["nested-policy", "huge-number-policy", "run-strategy", "levers-strategy", "bench-strategies"])
def test_pathological_policies_and_lever_values_are_one_line(argv, message, tmp_path, capsys):
    deep, huge = tmp_path / "deep.json", tmp_path / "huge.json"
    deep.write_text('{"format": "ccoverlap-policy/1", "x": ' + DEEP + "}")
    huge.write_text('{"format": "ccoverlap-policy/1", "x": ' + HUGE + "}")
    assert main([a.format(deep=deep, huge=huge) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.format(deep=deep, huge=huge) in err and len(err) < 400


def test_enable_refuses_a_pathological_policy_in_one_line(tmp_path):
    import ccoverlap
    from ccoverlap.util.errors import UsageError

    deep = tmp_path / "deep.json"
    deep.write_text('{"format": "ccoverlap-policy/1", "x": ' + DEEP + "}")
    with pytest.raises(UsageError, match="nested too deeply"):
        ccoverlap.enable(deep)
    with pytest.raises(UsageError, match="valid 1..64"):
        ccoverlap.enable({"format": "ccoverlap-policy/1", "levers": {"nccl-ctas": HUGE}})


def test_analyze_refuses_a_deeply_nested_trace_within_bounded_memory(tmp_path):
    """Nesting is refused within the decoder's bound on depth, before it costs memory: run under a 4 GiB
    address-space limit, which an unbounded reader (ijson's per-level paths) overran many times over."""
    (tmp_path / "rank0_trace.json").write_text('{"traceEvents": [{"args": ' + DEEP + "}]}")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    out = subprocess.run([sys.executable, "-m", "ccoverlap", "analyze", str(tmp_path)], env=clean_env(), text=True,
                         capture_output=True, timeout=120, preexec_fn=limit)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "rank0_trace.json: skipped: nested too deeply: not a Chrome trace" in out.stderr


def test_progress_says_what_runs_in_lines_where_stderr_is_no_terminal(capsys, monkeypatch):
    monkeypatch.setattr(output.Progress, "LINE_EVERY_S", 0.0)
    with output.Progress("bench", 2) as bar:
        bar.running("default")
        bar.advance("default")
        bar.running("priority+shape")
        bar.advance("priority+shape")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["bench: 1/2 done", "bench: 2/2 done"]
    assert lines[-1].endswith(", last priority+shape")


def test_text_is_shortened_at_a_word_with_an_ellipsis():
    from ccoverlap.util.text import shorten

    assert shorten("ended with exit code 1: AttributeError: x", 24) == "ended with exit code 1…"
    assert shorten("short enough", 40) == "short enough" and shorten("a  b\n c", 10) == "a b c"
    assert shorten("x" * 50, 10) == "x" * 9 + "…"  # one word longer than the room: cut, and said so
