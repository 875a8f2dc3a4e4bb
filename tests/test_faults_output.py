"""Every file a command writes goes through one output path (util/output.py): for every subcommand that writes,
a full device, a closed pipe, a read-only target, a target inside the input, a device or FIFO target and a
failed write each end in one line with the right exit code, leave nothing partial and the input's bytes as
they were. A subcommand that writes is one row of WRITERS (and of REFUSERS where it is too slow to run to the end
here: its target is refused before any work). In process through ccoverlap.cli.main, subprocess only for a
file-size limit."""
from __future__ import annotations

import contextlib
import hashlib
import os
import resource
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ccoverlap.cli import main
from ccoverlap.util import output

TRACES = Path(__file__).parent / "data" / "traces"
HANDMADE = TRACES / "handmade"


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    """A small doctor capture (its trace and alone window), as whatif reads it: one stream, back to back, each
    launch as long as alone, so the simulated default reproduces it and whatif predicts (and plots)."""
    import kineto_synth as ks
    from test_analysis_doctor import NCCL, alone_window

    from ccoverlap.doctor.record import alone_trace

    cap = tmp_path_factory.mktemp("whatif") / "cap"
    kernels = [ks.K("compute_a", 100, 50, launch_ts=90), ks.K(ks.NCCL, 150, 300, launch_ts=100, **NCCL | {"stream": 7}),
               ks.K("compute_a", 450, 500, launch_ts=110)]
    path = ks.write(cap / "rank0_trace.json", 0, 1, kernels, [])
    ks.write(alone_trace(path), 0, 1, alone_window(kernels), [])
    return cap


#: subcommands that run to the end here in a second: (id, argv with {out} the target and {in} the input (None:
#: the command reads none), the flag that names the target)
WRITERS = [
    ("analyze-json", ["analyze", "{in}", "--json", "{out}"], HANDMADE, "--json"),
    ("analyze-report", ["analyze", "{in}", "--report", "{out}"], HANDMADE, "--report"),
    ("whatif-json", ["whatif", "{in}", "--json", "{out}"], "capture", "--json"),
    ("whatif-plot", ["whatif", "{in}", "--plot", "{out}"], "capture", "--plot"),
    ("info", ["info", "--device", "h200", "--json", "{out}"], None, "--json"),
    ("levers", ["levers", "--json", "{out}"], None, "--json"),
    ("plan", ["plan", "--device", "h200", "--compute", "threads=256,regs=32", "--json", "{out}"], None, "--json"),
    ("occupancy", ["occupancy", "--device", "h200", "--threads", "256", "--regs", "32", "--json", "{out}"], None,
     "--json"),
]
#: subcommands that run a program, a GPU or minutes: only their refusals, made before any work, are run here
REFUSERS = [
    ("bench", ["bench", "--workload", "ddp", "--json", "{out}"], "--json"),
    ("doctor-json", ["doctor", "--out", "{tmp}/d", "--json", "{out}", "--", "true"], "--json"),
    ("doctor-report", ["doctor", "--out", "{tmp}/d", "--report", "{out}", "--", "true"], "--report"),
    ("tune-json", ["tune", "--out", "{tmp}/t", "--json", "{out}", "--", "true"], "--json"),
    ("tune-policy", ["tune", "--out", "{tmp}/t", "--policy-out", "{out}", "--", "true"], "--policy-out"),
    ("lab", ["lab", "--out", "{out}"], "--out"),
    ("occupancy-out", ["occupancy", "--validate", "1", "--out", "{out}"], "--out"),
]
ALL = [(i, argv, flag) for i, argv, _, flag in WRITERS] + REFUSERS
ids = pytest.mark.parametrize  # the rows' names are their first element


def _argv(argv: list[str], out, given, tmp: Path) -> list[str]:
    return [a.format(out=out, tmp=tmp, **{"in": given}) for a in argv]


def _input(given, request) -> Path | None:
    return request.getfixturevalue(given) if given == "capture" else given


def _digest(folder: Path | None) -> dict[str, str]:
    """Every file under `folder` by its bytes' hash (the input, unchanged)."""
    if folder is None:
        return {}
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    err = [e for e in err if "without a Stream Wait Event record" not in e and "warning:" not in e]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@contextlib.contextmanager
def _stdout(stream):
    real = sys.stdout
    sys.stdout = stream
    try:
        yield
    finally:
        sys.stdout = real


@ids(("row", "argv", "given", "flag"), WRITERS, ids=[w[0] for w in WRITERS])
def test_a_full_device_is_one_line_exit_1_and_stays_a_device(row, argv, given, flag, tmp_path, capsys, request):
    given = _input(given, request)
    before, dev = _digest(given), os.stat("/dev/full")
    assert main(_argv(argv, "/dev/full", given, tmp_path)) == 1
    line = _one_line(capsys)
    assert line.startswith(f"ccoverlap {argv[0]}: error: cannot write /dev/full: [Errno 28]") and "ENOSPC" in line
    after = os.stat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == dev.st_rdev and after.st_ino == dev.st_ino
    assert _digest(given) == before


@ids(("row", "argv", "given", "flag"), [w for w in WRITERS if w[3] == "--json"],
     ids=[w[0] for w in WRITERS if w[3] == "--json"])
@pytest.mark.parametrize("fault", ["full", "closed-pipe"])
def test_json_on_a_failing_standard_output_is_one_line_exit_1(row, argv, given, flag, fault, tmp_path, capsys,
                                                               request):
    given = _input(given, request)
    if fault == "full":
        stream, errno_name = open("/dev/full", "w"), "ENOSPC"  # noqa: SIM115 - closed below
    else:
        read, write = os.pipe()
        os.close(read)
        stream, errno_name = os.fdopen(write, "w"), "EPIPE"
    with stream, _stdout(stream):
        code = main(_argv(argv, "-", given, tmp_path))
    assert code == 1
    line = _one_line(capsys)
    assert line.startswith(f"ccoverlap {argv[0]}: error: cannot write standard output: [Errno ") and errno_name in line
    assert sorted(tmp_path.iterdir()) == []


def _release(reader: threading.Thread, fifo: Path) -> None:
    """Let a reader blocked on the FIFO go (the command never opened it): opened for writing without blocking, as
    a blocking open waits forever once the reader has just gone (ENXIO: no reader left, nothing to release)."""
    deadline = time.monotonic() + 10
    while reader.is_alive() and time.monotonic() < deadline:  # (a reader not yet at its open: try again)
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(0.05)


@ids(("row", "argv", "given", "flag"), WRITERS, ids=[w[0] for w in WRITERS])
def test_a_fifo_target_is_written_in_place_and_stays_a_fifo(row, argv, given, flag, tmp_path, capsys, request):
    given = _input(given, request)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    try:
        code = main(_argv(argv, fifo, given, tmp_path))
    finally:
        _release(reader, fifo)
    assert code == 0, capsys.readouterr().err
    assert got and got[0] and fifo.is_fifo() and [p.name for p in tmp_path.iterdir()] == ["fifo"]  # nothing beside


@ids(("row", "argv", "given", "flag"), WRITERS, ids=[w[0] for w in WRITERS])
def test_the_null_device_is_written_in_place_never_replaced(row, argv, given, flag, tmp_path, capsys, request):
    assert output.in_place("/dev/null")  # else the command would not be run onto it
    given = _input(given, request)
    dev = os.stat("/dev/null")
    assert main(_argv(argv, "/dev/null", given, tmp_path)) == 0, capsys.readouterr().err
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (dev.st_ino, dev.st_rdev)
    assert not Path("/dev/null_files").exists() and not Path("/dev/null.png").exists()


@ids(("row", "argv", "flag"), ALL, ids=[a[0] for a in ALL])
def test_a_read_only_target_is_refused_unless_forced(row, argv, flag, tmp_path, capsys, request):
    given = next((_input(w[2], request) for w in WRITERS if w[0] == row), None)
    target = tmp_path / "old.out"
    target.write_text("precious")
    target.chmod(0o444)
    assert main(_argv(argv, target, given, tmp_path)) == 2
    assert _one_line(capsys) == f"ccoverlap {argv[0]}: error: {flag} {target}: read-only; --force replaces it"
    assert target.read_text() == "precious" and sorted(p.name for p in tmp_path.iterdir()) == ["old.out"]
    if row in {w[0] for w in WRITERS}:
        assert main([*_argv(argv, target, given, tmp_path), "--force"]) == 0
        assert target.read_bytes() != b"precious"


@ids(("row", "argv", "flag"), ALL, ids=[a[0] for a in ALL])
@pytest.mark.parametrize("kind", ["socket", "under-a-file", "a-folder"])
def test_a_target_that_is_no_file_to_make_is_refused_before_any_work(row, argv, flag, kind, tmp_path, capsys,
                                                                    request):
    given = next((_input(w[2], request) for w in WRITERS if w[0] == row), None)
    if kind == "socket":
        target = tmp_path / "s.sock"
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
        expected = "is neither a regular file, a character device nor a FIFO"
    elif kind == "under-a-file":
        (tmp_path / "f").write_text("x")
        target, expected = tmp_path / "f" / "out", f"{tmp_path / 'f'} is a file, not a directory"
    else:
        target, expected = tmp_path, "is a directory"
    before = sorted(tmp_path.iterdir())
    try:
        assert main(_argv(argv, target, given, tmp_path)) == 2
    finally:
        if kind == "socket":
            sock.close()
    line = _one_line(capsys)
    assert line.startswith(f"ccoverlap {argv[0]}: error: {flag} ") and line.endswith(expected), line
    assert sorted(tmp_path.iterdir()) == before
    if kind == "socket":
        assert stat.S_ISSOCK(os.stat(target).st_mode)


def _inside(given: Path) -> list[Path]:
    """Targets that are the input: its folder, a file in it (an existing trace), a new file in it."""
    trace = next(p for p in sorted(given.rglob("*")) if p.is_file())
    return [given, trace, given / "new.out"]


@ids(("row", "argv", "given", "flag"), [w for w in WRITERS if w[2]], ids=[w[0] for w in WRITERS if w[2]])
def test_a_target_inside_the_input_is_refused_and_the_input_unchanged(row, argv, given, flag, tmp_path, capsys,
                                                                      request):
    given = _input(given, request)
    before = _digest(given)
    for target in _inside(given):
        assert main(_argv(argv, target, given, tmp_path)) == 2
        line = _one_line(capsys)
        assert line.startswith(f"ccoverlap {argv[0]}: error: {flag} ") and "the input" in line, line
        assert _digest(given) == before and not (given / "new.out").exists()


def test_the_baseline_and_a_report_folder_holding_the_input_are_refused(tmp_path, capsys):
    strategies = TRACES / "strategies"
    before = _digest(strategies)
    assert main(["analyze", str(strategies), "--baseline", str(strategies / "default"), "--report",
                 str(strategies / "default" / "r.html")]) == 2
    assert "the input" in _one_line(capsys)
    assert _digest(strategies) == before
    # the report's PNG folder <name>_files would be the input folder itself
    given = tmp_path / "r_files"
    given.mkdir()
    (given / "rank0_trace.json.gz").write_bytes((strategies / "default" / "rank0_trace.json.gz").read_bytes())
    before = _digest(given)
    assert main(["analyze", str(given), "--report", str(tmp_path / "r.html")]) == 2
    assert _one_line(capsys).startswith("ccoverlap analyze: error: --report's folder ")
    assert _digest(given) == before and sorted(tmp_path.iterdir()) == [given]


def _fsize_limit() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))


@ids(("row", "argv", "given", "flag"), [w for w in WRITERS if w[0] in ("analyze-report", "info", "whatif-json")],
     ids=["analyze-report", "info", "whatif-json"])
def test_a_full_disk_leaves_neither_a_partial_file_nor_a_temporary(row, argv, given, flag, tmp_path, request):
    """A write that fails mid-file (a file-size limit of 64 bytes, as a disk all but full) keeps the previous
    file whole and leaves no temporary beside it."""
    given = _input(given, request)
    target = tmp_path / "out" / "t.out"
    target.parent.mkdir()
    target.write_text("previous")
    proc = subprocess.run([sys.executable, "-m", "ccoverlap", *_argv(argv, target, given, tmp_path)],
                          capture_output=True, text=True, preexec_fn=_fsize_limit, timeout=120)
    err = [e for e in proc.stderr.strip().splitlines() if "without a Stream Wait Event record" not in e]
    assert proc.returncode == 1 and len(err) == 1, proc.stderr
    assert err[0].startswith(f"ccoverlap {argv[0]}: error: cannot write {target}") and "EFBIG" in err[0]
    assert target.read_text() == "previous" and sorted(p.name for p in target.parent.iterdir()) == ["t.out"]
