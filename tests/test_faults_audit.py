"""What the audit of every subcommand against issue 29's faults found wanting (each test's docstring: what it did
before), each case checked for its one line, its exit code, nothing partial left and the input unchanged. In process
through main() where the fault allows; the rest in subprocesses started side by side in one fixture (they mostly
wait)."""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from test_interposer import clean_env

from ccoverlap.cli import main
from ccoverlap.control.procs import STOP_SIGNALS, stop_on_signals

CAPTURE = Path(__file__).parent / "data" / "traces" / "h200" / "default"  # two ranks, recorded on an H200
DISPATCH = Path(__file__).parent.parent / "src" / "ccoverlap" / "examples" / "dispatch"  # a doctor capture


def _digest(*folders: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for f in folders for p in sorted(f.rglob("*"))
            if p.is_file()}


def _one_line(capsys) -> str:
    err = [e for e in capsys.readouterr().err.splitlines() if "without a Stream Wait Event record" not in e]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]



# --- standard output closed (`>&-`: Python's sys.stdout is None) ---

PRINTERS = {
    "info": ["info", "--device", "h200"], "levers": ["levers"],
    "plan": ["plan", "--device", "h200", "--compute", "threads=256,regs=32"],
    "occupancy": ["occupancy", "--device", "h200", "--threads", "256", "--regs", "32"],
    "interposer": ["interposer", "--path"], "analyze": ["analyze", str(CAPTURE)],
    "analyze-json": ["analyze", str(CAPTURE), "--json", "-"], "whatif": ["whatif", str(DISPATCH)],
    "example": ["example", "{tmp}/ex"], "help": ["--help"],
}


@pytest.mark.parametrize("argv", PRINTERS.values(), ids=PRINTERS)
def test_a_closed_standard_output_is_one_line_exit_1(argv, tmp_path, capsys, monkeypatch):
    """Every write to it was an AttributeError on None, a traceback."""
    before = _digest(CAPTURE, DISPATCH)
    monkeypatch.setattr(sys, "stdout", None)
    code = main([a.format(tmp=tmp_path) for a in argv])
    prog = f"ccoverlap {argv[0]}" if not argv[0].startswith("-") else "ccoverlap"
    assert code == 1 and _one_line(capsys) == (f"{prog}: error: cannot write standard output: [Errno 9] Bad file "
                                               "descriptor (EBADF)")
    assert _digest(CAPTURE, DISPATCH) == before


# --- outputs that no file or folder can be made at ---

LOOPED = {
    "info-json": ["info", "--device", "h200", "--json", "{loop}"],
    "analyze-report": ["analyze", str(CAPTURE), "--report", "{loop}"],
    "example": ["example", "{loop}"],
    "example-under": ["example", "{loop}/ex"],
    "doctor-out": ["doctor", "--out", "{loop}", "--", "touch", "{tmp}/ran"],
    "tune-out": ["tune", "--out", "{loop}", "--", "touch", "{tmp}/ran"],
    "run-stats": ["run", "--pad-bytes", "64", "--stats", "{loop}", "--", "touch", "{tmp}/ran"],
}


@pytest.mark.parametrize("argv", LOOPED.values(), ids=LOOPED)
def test_a_symbolic_link_loop_as_an_output_is_refused_before_any_work(argv, tmp_path, capsys):
    """The loop's `exists()` is False: `example` and `doctor --out` ended in a traceback (mkdir, resolve), `tune
    --out` after its first trial, `--json` replaced the link."""
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(loop)
    given = [a.format(loop=loop, tmp=tmp_path) for a in argv]
    assert main(given) == 2
    line = _one_line(capsys)
    assert line.startswith(f"ccoverlap {argv[0]}: error: ") and line.endswith(": Too many levels of symbolic links")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop", "loop2"] and loop.is_symlink()


def test_a_dangling_link_as_a_new_folder_is_refused(tmp_path, capsys):
    (tmp_path / "ex").symlink_to(tmp_path / "gone")
    assert main(["example", str(tmp_path / "ex")]) == 2
    assert _one_line(capsys) == (f"ccoverlap example: error: DIR {tmp_path / 'ex'}: a symbolic link to "
                                 f"{tmp_path / 'gone'}, which does not exist")


@pytest.mark.parametrize(("target", "why"), [
    ("{tmp}/f/s.json", "{tmp}/f is a file, not a directory"), ("{tmp}/d", "is a directory"),
    ("{tmp}/policy.json", "is (or holds, or lies in) the input {tmp}/policy.json; give a path outside it"),
], ids=["under-a-file", "a-folder", "the-policy"])
def test_launch_stats_that_cannot_be_written_are_refused_before_the_command_runs(target, why, tmp_path, capsys):
    """The interposer writes them as each process ends, long after: a stats file that could never be written was
    one line per process then, if any."""
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    (tmp_path / "policy.json").write_text('{"pad_bytes": 64}')
    before = _digest(tmp_path)
    stats = target.format(tmp=tmp_path)
    assert main(["run", "--policy", str(tmp_path / "policy.json"), "--stats", stats, "--",
                 "touch", str(tmp_path / "ran")]) == 2
    assert _one_line(capsys) == f"ccoverlap run: error: --stats {stats}: {why.format(tmp=tmp_path)}"
    assert _digest(tmp_path) == before and not (tmp_path / "ran").exists()


def test_launch_stats_to_a_fifo_are_written_in_place(fake, tmp_path):
    """The interposer renamed its temporary over the target: over /dev/null, had it been given (a device is written
    in place, as util/output writes one)."""
    fifo = tmp_path / "stats"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    out = subprocess.run([sys.executable, "-m", "ccoverlap", "run", "--pad-bytes", "64", "--stats", str(fifo), "--",
                          str(fake / "launcher"), "paths"], env=clean_env(), capture_output=True, text=True,
                         timeout=120)
    reader.join(30)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert json.loads(got[0])["padded"] > 0 and fifo.is_fifo() and [p.name for p in tmp_path.iterdir()] == ["stats"]


# --- policy files that are no regular file: never opened, never waited on ---

@pytest.mark.parametrize(("make", "what"), [
    (os.mkfifo, "a FIFO"), (lambda p: p.symlink_to("/dev/zero"), "a character device"),
    (lambda p: p.mkdir(), "a directory"),
], ids=["fifo", "device", "directory"])
@pytest.mark.parametrize("how", ["run --policy", "CCOVERLAP_POLICY"])
def test_a_policy_file_that_is_no_regular_file_is_refused_unopened(make, what, how, tmp_path, capsys, monkeypatch,
                                                                    no_hang):
    """The library's reader opened it: a FIFO waited for a writer (the command, and every process the interposer
    was preloaded into), a device was read, a folder was 'not a JSON object'."""
    path = tmp_path / "policy.json"
    make(path)
    if how == "run --policy":
        code = main(["run", "--policy", str(path), "--", "true"])
    else:
        monkeypatch.setenv("CCOVERLAP_POLICY", str(path))
        code = main(["interposer"])
    prog = "run" if how == "run --policy" else "interposer"
    assert code == 2 and _one_line(capsys) == f"ccoverlap {prog}: error: CCOVERLAP_POLICY={path}: {what}, not a " \
                                              "policy file"


# --- traces and specs ---

def _capture_with(tmp_path: Path, edit) -> Path:
    folder = tmp_path / "cap"
    shutil.copytree(CAPTURE, folder)
    for path in folder.iterdir():
        doc = json.loads(gzip.decompress(path.read_bytes()))
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel":
                edit(e)
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return folder


def test_kernels_whose_durations_cannot_be_read_get_no_cpu_verdict(tmp_path, capsys):
    """Every kernel's dur negative: the CPU timeline's reader dropped them before it looked for GPU work, so the
    capture passed for a CPU run and printed a CPU verdict, exit 0, its GPU lines unsaid."""
    folder = _capture_with(tmp_path, lambda e: e.update(dur=-3))
    code = main(["analyze", str(folder)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "Traceback" not in err
    assert "with a negative dur" in err and err.splitlines()[-1] == (f"ccoverlap analyze: error: nothing could be "
                                                                     f"analysed in {folder}")


def test_one_unreadable_trace_is_one_line_naming_it(tmp_path, capsys):
    path = tmp_path / "rank0_trace.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": ['))
    assert main(["analyze", str(path)]) == 2
    assert _one_line(capsys) == (f"ccoverlap analyze: error: {path}: skipped: invalid or truncated JSON (Input data "
                                 f"was truncated); nothing could be analysed in {path}")


@pytest.mark.parametrize("kind", ["corrupt", "fifo"])
def test_a_baseline_without_a_usable_trace_is_one_line_exit_2(kind, tmp_path, capsys, no_hang):
    """It was left out, named, and the analysis went on without the slowdowns asked for: exit 0."""
    base = tmp_path / "base"
    base.mkdir()
    trace = base / "rank0_trace.json.gz"
    trace.write_bytes(b"\x1f\x8b not gzip") if kind == "corrupt" else os.mkfifo(trace)
    code = main(["analyze", str(CAPTURE), "--baseline", str(base), "--json", str(tmp_path / "a.json")])
    why = "truncated or corrupt gzip (Unknown compression method)" if kind == "corrupt" else "a FIFO, not a trace file"
    assert code == 2 and _one_line(capsys) == (f"ccoverlap analyze: error: --baseline {base}: no usable trace: "
                                               f"{trace}: skipped: {why}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base"]


@pytest.mark.parametrize(("argv", "key"), [
    (["--compute", "threads=256,regs=32,regs=40"], "compute spec 'threads=256,regs=32,regs=40': regs"),
    (["--compute", "threads=256,regs=32", "--comm", "nccl:ctas=4,grid=8"], "comm spec 'ctas=4,grid=8': grid"),
], ids=["twice", "alias"])
def test_a_spec_naming_a_key_twice_is_refused(argv, key, capsys):
    """The last one won, silently."""
    assert main(["plan", "--device", "h200", *argv]) == 2
    assert _one_line(capsys) == f"ccoverlap plan: error: {key} given twice"


def test_stop_on_signals_leaves_an_ignored_signal_ignored():
    """`nohup` ignores SIGHUP, a background job of a script SIGINT: the command must not be stopped by them."""
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with stop_on_signals():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
    finally:
        for s, h in before.items():
            signal.signal(s, h)


# --- in subprocesses: a file-size limit, signals ---

#: `analyze --jobs 2` whose workers note their pid in argv[1] and sleep: a parent signalled while they work
SLOW_ANALYZE = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    import ccoverlap.analysis as analysis
    from ccoverlap.cli import main

    Path(sys.argv[1]).mkdir()

    def first(task):
        (Path(sys.argv[1]) / str(os.getpid())).touch()
        time.sleep(120)

    analysis.first = first
    sys.exit(main(["analyze", sys.argv[2], "--jobs", "2", "--json", sys.argv[3]]))
""")
#: `info --json` stopped by SIGTERM in the middle of its write: what main()'s unwinding leaves
TERM_MID_WRITE = textwrap.dedent("""
    import os, signal, sys, time
    import ccoverlap.cli.info as info
    from ccoverlap.cli import main
    from ccoverlap.util.output import open_output

    def write_json(path, obj, **kw):
        with open_output(path) as f:
            f.write("{")
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)

    info.write_json = write_json
    sys.exit(main(["info", "--device", "h200", "--json", sys.argv[1]]))
""")


def _full_disk() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[int, str, Path]]:
    """name -> (exit code or -signal, stderr, its folder), every run started at once; the analyses signalled
    once both workers are at work."""
    started = {}

    def start(name: str, argv: list[str], **kw) -> None:
        tmp = tmp_path_factory.mktemp(name)
        argv = [a.replace("{tmp}", str(tmp)) for a in argv]
        started[name] = tmp, subprocess.Popen([sys.executable, *argv], env=clean_env(), text=True,
                                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)

    start("example_full", ["-m", "ccoverlap", "example", "{tmp}/ex"], preexec_fn=_full_disk)
    start("term_mid_write", ["-c", TERM_MID_WRITE, "{tmp}/i.json"])
    for sig in ("SIGTERM", "SIGKILL"):
        start(f"analyze_{sig}", ["-c", SLOW_ANALYZE, "{tmp}/pids", str(CAPTURE), "{tmp}/a.json"])
    for sig in ("SIGTERM", "SIGKILL"):
        tmp, proc = started[f"analyze_{sig}"]
        deadline = time.monotonic() + 60
        while len(list((tmp / "pids").glob("*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(getattr(signal, sig))
    done = {}
    for name, (tmp, proc) in started.items():
        _, err = proc.communicate(timeout=120)
        done[name] = proc.returncode, err, tmp
    return done


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for an init that may never reap it, in a container)."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_analyze_signalled_leaves_no_worker_running_and_writes_nothing(runs, sig):
    """A worker busy with a file when its parent was killed went on, and two of them, each blocked sending into a
    pipe whose other end the other held, waited forever."""
    code, err, tmp = runs[f"analyze_{sig}"]
    assert code == -getattr(signal, sig) and "Traceback" not in err, err
    pids = [int(p.name) for p in (tmp / "pids").iterdir()]
    deadline = time.monotonic() + 10  # SIGKILL: the workers' parent-death signal is on its way
    while any(map(_running, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(pids) == 2 and not any(map(_running, pids))
    assert sorted(p.name for p in tmp.iterdir()) == ["pids"]


def test_sigterm_mid_write_leaves_no_temporary(runs):
    """SIGTERM ended the process where it stood: the temporary beside --json stayed."""
    code, err, tmp = runs["term_mid_write"]
    assert code == -signal.SIGTERM and "Traceback" not in err, err
    assert list(tmp.iterdir()) == []


def test_example_on_a_full_disk_is_one_line_and_leaves_no_folder(runs):
    """Its files were written one by one, in place: a traceback and half a capture."""
    code, err, tmp = runs["example_full"]
    assert code == 1 and err.splitlines() == [f"ccoverlap example: error: cannot write {tmp / 'ex'}: [Errno 27] File "
                                              "too large (EFBIG)"], err
    assert list(tmp.iterdir()) == []
