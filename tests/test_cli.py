import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccoverlap.gpu import cuda_driver
from ccoverlap.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_occupancy_json(capsys):
    code, out, _ = run(capsys, "occupancy", "--device", "h200", "--threads", "640", "--regs", "96",
                       "--static-smem", "22592", "--dynamic-smem", "82240", "--json", "-")
    assert code == 0
    data = json.loads(out)
    assert data["blocks"] == 1 and data["limiting"] == ["registers"] and data["limits"]["shared_memory"] == 2


def test_occupancy_text(capsys):
    code, out, _ = run(capsys, "occupancy", "--device", "a100", "--threads", "256", "--regs", "16")
    assert code == 0 and out.startswith("8 blocks/SM on a100, limited by warps")


def test_plan_json_with_nccl_override(capsys):
    code, out, _ = run(capsys, "plan", "--device", "h200", "--compute", "threads=256,regs=16",
                       "--comm", "nccl:threads=288", "--json", "-")
    data = json.loads(out)
    assert code == 0 and data["feasible"] and data["comm"]["threads"] == 288 and data["compute_blocks_after"] == 1
    assert "regs" in data["comm_sources"]


def test_plan_text_explains_infeasible(capsys):
    code, out, _ = run(capsys, "plan", "--device", "h200", "--compute", "threads=256,regs=32",
                       "--comm", "threads=640,regs=96,static=22592,dynamic=82240,ctas=16,cluster=4")
    assert code == 0
    assert "infeasible: registers is the binding resource" in out and "partition SMs" in out


def test_info_json_lists_presets_without_gpu(capsys, monkeypatch):
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    code, out, _ = run(capsys, "info", "--json", "-")
    assert code == 0
    assert [d["name"] for d in json.loads(out)["devices"]] == ["a40", "a100", "h100", "h200", "mi250x"]


def test_info_table_for_one_preset(capsys):
    code, out, _ = run(capsys, "info", "--device", "h100")
    assert code == 0 and "233472" in out and "h100" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["occupancy", "--device", "h300", "--threads", "64", "--regs", "32"], "unknown device 'h300'"),
        (["occupancy", "--device", "h200", "--threads", "0", "--regs", "32"],
         "threads=0 is out of range: valid 1..1024"),
        (["occupancy", "--device", "h200", "--threads", "64", "--regs", "300"],
         "regs=300 is out of range: valid 1..255"),
        (["occupancy", "--device", "h200", "--threads", "64", "--regs", "32", "--dynamic-smem", "300000"],
         "dynamic=300000 is out of range"),
        (["occupancy", "--device", "h200", "--threads", "64"], "--threads and --regs are required"),
        (["plan", "--device", "h200", "--compute", "threads=64"], "regs= is required"),
        (["plan", "--device", "h200", "--compute", "threads=64,regs=32", "--comm", "bogus"], "is not key=value"),
        (["plan", "--device", "h200", "--compute", "threads=64,regs=32", "--per-sm", "0"],
         "--per-sm=0 is out of range"),
        (["plan", "--device", "mi250x", "--compute", "threads=64,regs=32"], "--comm nccl needs an NVIDIA device"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_argparse_errors_are_one_line_too():
    proc = subprocess.run([sys.executable, "-m", "ccoverlap", "plan", "--threads"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "see --help" in proc.stderr


@pytest.mark.parametrize("command", ["info", "occupancy", "plan"])
def test_every_command_has_teaching_help(command):
    proc = subprocess.run([sys.executable, "-m", "ccoverlap", command, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "--device" in proc.stdout


TRACES = Path(__file__).parent / "data" / "traces"


def _piped(argv: list[str], read_first_line: bool) -> subprocess.CompletedProcess:
    """Run ccoverlap into a one-page pipe; its reader takes one line (or nothing) and closes, as `| head -1` does."""
    read, write = os.pipe()
    fcntl.fcntl(read, fcntl.F_SETPIPE_SZ, 4096)
    if not read_first_line:
        os.close(read)  # a reader already gone: the first write meets a closed pipe
    proc = subprocess.Popen([sys.executable, "-m", "ccoverlap", *argv], stdout=write, stderr=subprocess.PIPE, text=True)
    os.close(write)
    if read_first_line:
        while os.read(read, 1) not in (b"\n", b""):
            pass
        os.close(read)
    _, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, proc.returncode, None, err)


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="needs Linux pipes")
@pytest.mark.parametrize(("argv", "read_first_line"), [
    (["info", "--json", "-"], False),  # 3.5 KB: fits a pipe, so the reader leaves before the write
    (["analyze", str(TRACES / "h200"), "--json", "-"], True),  # 5.2 KB: more than the pipe holds after one line
], ids=["info", "analyze"])
def test_a_closed_pipe_is_one_line_and_exit_1(argv, read_first_line):
    proc = _piped(argv, read_first_line)
    # besides the one line: analyze's notes on the H200 traces, recorded without CUDA sync events
    notes = [x for x in proc.stderr.splitlines() if x.startswith("ccoverlap analyze: ")
             and "without a Stream Wait Event record" in x]
    assert "Traceback" not in proc.stderr and len(notes) == (1 if argv[0] == "analyze" else 0)
    assert all(": 6 files: " in x for x in notes)  # one line for the kind, naming its 6 files
    assert proc.stderr.splitlines()[len(notes):] == [
        f"ccoverlap {argv[0]}: error: cannot write standard output: [Errno 32] Broken pipe (EPIPE)"]
    assert proc.returncode == 1


def test_a_named_subcommand_imports_no_other():
    """`ccoverlap analyze ...` builds its own parser only: the other subcommands' modules are not imported (their
    imports took 0.1 s); with no subcommand named, --help still lists every one."""
    code = ("import sys; from ccoverlap.cli import main, COMMANDS\n"
            "try:\n    main(['analyze', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(n for n in COMMANDS if f'ccoverlap.cli.{n}' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "['analyze']"
    from ccoverlap.cli import COMMANDS, build_parser
    import argparse
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(COMMANDS)
