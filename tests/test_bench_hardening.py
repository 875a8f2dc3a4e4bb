"""`ccoverlap bench` when things go wrong around it: signals (no rank outlives the bench, no
temporary folder stays, the JSON stays valid), output paths that cannot be written, a full disk,
a chart that fails, a closed pipe. CPU only: gloo ranks."""
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_interposer import foreground

from ccoverlap.gpu import cuda_driver
from ccoverlap.bench import launcher
from ccoverlap.cli import main
from ccoverlap.util import output as _output

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

WORKER = "ccoverlap.bench.worker"


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch):
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state, ppid, ...), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in "ZX"


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (its ranks sit below their keepers)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (fields := _stat(int(d.name))):
            children.setdefault(int(fields[1]), []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        out += (below := children.get(todo.pop(), []))
        todo += below
    return out


def _ranks_of(pid: int) -> list[int]:
    ranks = []
    for p in _descendants(pid):
        try:
            if WORKER in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace"):
                ranks.append(p)
        except OSError:
            pass
    return ranks


def _tied(pid: int) -> bool:
    """The rank reached worker.main: SIGINT no longer caught (a rank waiting in a collective ends at once)."""
    try:
        caught = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return not int(caught.split()[1], 16) & (1 << (signal.SIGINT - 1))


def _until(what, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if what():
            return True
        time.sleep(0.1)
    return what()


_STARTED: list[int] = []


@pytest.fixture(autouse=True)
def _reap():
    """Whatever a failed test leaves running is killed (by pid: these tests' ranks and benches only)."""
    yield
    for pid in _STARTED:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    _STARTED.clear()


def _start(tmp_path: Path) -> tuple[subprocess.Popen, list[int], Path, Path]:
    """A bench that would run for hours, in a session of its own, once both ranks are running."""
    tmp, out = tmp_path / "tmp", tmp_path / "r.json"
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ccoverlap", "bench", "--workload", "ddp", "--device", "cpu", "--nproc", "2", "--tiny",
         "--strategies", "default", "--steps", "100000", "--json", str(out)],
        env=os.environ | {"TMPDIR": str(tmp)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=foreground)
    _STARTED.append(proc.pid)
    try:
        assert _until(lambda: len(_ranks_of(proc.pid)) == 2 or proc.poll() is not None, 120) and proc.poll() is None, (
            proc.poll() and proc.stderr.read())
        ranks = _ranks_of(proc.pid)
        _STARTED.extend(ranks)
        assert _until(lambda: all(_tied(r) for r in ranks), 120), "the ranks did not reach their main()"
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    time.sleep(1.0)  # into their steps, waiting on each other in gloo collectives
    return proc, ranks, tmp, out


@pytest.mark.parametrize(("signum", "group", "code"), [
    (signal.SIGINT, False, 130),
    (signal.SIGINT, True, 130),  # Ctrl-C: the whole foreground process group
    (signal.SIGTERM, False, -signal.SIGTERM),  # dies of it
    (signal.SIGHUP, False, -signal.SIGHUP),  # the terminal went away
])
def test_a_stopped_bench_leaves_no_rank_no_folder_and_valid_json(signum, group, code, tmp_path):
    proc, ranks, tmp, out = _start(tmp_path)
    t0 = time.monotonic()
    (os.killpg if group else os.kill)(proc.pid, signum)
    assert proc.wait(timeout=30) == code
    err = proc.stderr.read()
    assert time.monotonic() - t0 < launcher.GRACE_S + 10
    assert not any(_alive(r) for r in ranks)
    assert list(tmp.glob("ccoverlap-bench-*")) == []
    data = json.loads(out.read_text())
    assert data["complete"] is False and data["interrupted"] == signal.Signals(signum).name and data["rows"] == []
    assert "Traceback" not in err and f"interrupted by {signal.Signals(signum).name}" in err


def test_ranks_die_with_a_killed_bench(tmp_path):
    proc, ranks, _, _ = _start(tmp_path)
    proc.kill()  # no clean-up at all: the ranks' keepers end them
    proc.wait(timeout=60)
    assert _until(lambda: not any(_alive(r) for r in ranks), 20)


def test_a_closed_pipe_ends_the_bench_in_one_line_after_the_results(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "ccoverlap", "bench", "--workload", "ddp", "--device", "cpu",
                             "--strategies", "priority", "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # `| head -0`: every write to stdout fails
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 1 and err == (
        "ccoverlap bench: error: cannot write standard output: [Errno 32] Broken pipe (EPIPE)\n")
    assert json.loads(out.read_text())["complete"]


def _no_run(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the bench started work")

    monkeypatch.setattr(launcher, "run_iter", refuse)


@pytest.mark.parametrize(("where", "message"), [
    (lambda t: t / "file" / "r.json", "is a file, not a directory"),
    (lambda t: t, "is a directory"),
    (lambda t: Path("/proc/ccoverlap/r.json"), "cannot write in /proc"),
])
def test_an_unwritable_json_path_is_refused_before_any_work(where, message, tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("")
    _no_run(monkeypatch)
    assert main(["bench", "--workload", "ddp", "--strategies", "default", "--json", str(where(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_a_read_only_folder_is_refused(tmp_path, monkeypatch, capsys):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    _no_run(monkeypatch)
    assert main(["bench", "--workload", "ddp", "--json", str(ro / "sub" / "r.json")]) == 2
    assert "cannot write in" in capsys.readouterr().err


def test_missing_folders_of_the_json_path_are_fine(tmp_path, monkeypatch, capsys):
    out = tmp_path / "a" / "b" / "r.json"
    assert main(["bench", "--workload", "ddp", "--strategies", "priority", "--json", str(out)]) == 1  # n/a: nothing ran
    assert json.loads(out.read_text())["complete"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--workload", "ddp", "--trace", "{file}"], "is a file"),
    (["--workload", "ddp", "--trace", "{file}/traces"], "is a file, not a directory"),
    (["--workload", "ddp", "--trace", "/proc/ccoverlap"], "cannot write in /proc"),
    (["--workload", "micro", "--trace", "{dir}"], "--trace: micro has no training step to trace; select one of ddp"),
])
def test_bad_trace_requests_are_refused_before_any_work(argv, message, tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("")
    _no_run(monkeypatch)
    argv = [a.format(file=tmp_path / "file", dir=tmp_path / "t") for a in argv]
    assert main(["bench", "--strategies", "default", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_micro_beside_a_traced_workload_is_named_and_left_untraced(tmp_path, capsys):
    traces = tmp_path / "t"
    assert main(["bench", "--workload", "micro,ddp", "--device", "cpu", "--steps", "1", "--tiny", "--strategies",
                 "default", "--repeats", "1", "--trace", str(traces)]) == 0
    assert "warning: --trace: micro has no training step to trace" in capsys.readouterr().err
    assert sorted(p.relative_to(traces).as_posix() for p in traces.rglob("*.json.gz")) == [
        "ddp/default/rank0_trace.json.gz", "ddp/default/rank1_trace.json.gz"]


def test_write_json_leaves_no_temporary_file_on_failure(tmp_path):
    class Full:
        def __str__(self):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    out = tmp_path / "r.json"
    out.write_text('{"old": true}')
    with pytest.raises(OSError):
        _output.write_json(out, {"rows": ["x" * 100000, Full()]})  # fails half-way through the file
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"] and json.loads(out.read_text()) == {"old": True}


def test_a_full_disk_is_one_line_and_leaves_nothing_behind(tmp_path, capsys, full_disk):
    room_again = full_disk(tmp_path)
    out = tmp_path / "r.json"
    code = main(["bench", "--workload", "ddp", "--strategies", "priority,default", "--repeats", "1",
                 "--json", str(out)])
    room_again()
    *progress, err = capsys.readouterr().err.splitlines()  # the first write follows the first process set
    assert code == 1 and err.startswith(f"ccoverlap bench: error: cannot write {out}: "
                                        "[Errno 28] No space left on device")
    # the progress (a line a set, and off a terminal one every Progress.LINE_EVERY_S of a slow run) before it
    assert all(line.startswith(("[", "bench: ")) for line in progress), progress
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


def _fake_run(cfg, launcher_name="spawn", sets=None, progress=None):
    for ps in sets:
        yield ps, [{"workload": "ddp", "strategy": ps.label, "levers": {}, "status": "ok", "repeat": ps.repeat,
                    "step_samples_ms": [1.5, 2.0, 2.5], "compute_samples_ms": [1.0] * 3, "exposed_comm_note": None,
                    "counters": {}, "losses": [1.0], "samples": {}, "interposer": None, "wall_s": 1.0}], 1.0


def test_a_failed_chart_is_a_warning_not_a_failure(tmp_path, monkeypatch, capsys):
    from ccoverlap.bench import session

    def broken(rows, path):
        raise RuntimeError("no fonts")

    monkeypatch.setattr(launcher, "run_iter", _fake_run)
    monkeypatch.setattr(session, "bars", broken)  # as the session calls it
    out = tmp_path / "r.json"
    assert main(["bench", "--workload", "ddp", "--strategies", "default", "--json", str(out)]) == 0
    captured = capsys.readouterr()
    assert "warning: no chart" in captured.err and "no fonts" in captured.err and captured.err.count("\n") == 1
    assert json.loads(out.read_text())["complete"] and f"wrote {out}\n" in captured.out


def test_a_temporary_folder_that_disappears_is_a_failed_row(monkeypatch):
    """The folder goes away under the ranks (a tmp cleaner, a full disk): the strategy's rows say so, naming the
    process set."""
    from ccoverlap.bench.config import BenchConfig
    from ccoverlap.control.launch import Launch

    class Vanishing(Launch):
        def start(self, cmd, base=os.environ, **io):  # the "rank" removes the folder its spec sits in, and ends
            return super().start(["sh", "-c", 'rm -rf "$(dirname "$0")"', cmd[-1]], base, **io)

    monkeypatch.setattr(launcher, "rank_launch", lambda strategy, tmp: Vanishing())
    cfg = BenchConfig(workloads=("ddp",), device="cpu", nproc=1, strategies=("default",),
                      repeats=1).resolved(gpus=0).validate()
    (row,) = launcher.run(cfg)
    assert (row["status"].startswith("failed: repeat 1/1: the bench's temporary folder ")
            and "No such file or directory" in row["status"])
