"""`ccoverlap doctor`: an unmodified program profiled through the start-up hook (any number of ranks), its step
times, its exit code and signal passed through, what was captured said in one line, and the analysis of the
traces. CPU only (gloo); tests/data/doctor_train.py is the program. The GPU half is in bench/device/doctor.sh."""
from __future__ import annotations

import gzip
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_interposer import clean_env

from ccoverlap.control import startup
from ccoverlap.cli import main
from ccoverlap.doctor import record
from ccoverlap.doctor.config import CaptureConfig, DoctorConfig

DATA = Path(__file__).parent / "data"
TRAIN = str(DATA / "doctor_train.py")
H200 = DATA / "traces" / "h200" / "default"


def steps_in(trace: Path) -> list[str]:
    """The ProfilerStep annotations of a trace, as the CPU recorded them."""
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    return sorted({e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")})


def losses(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if re.match(r"step \d+ loss ", line)]


def table_rows(text: str) -> list[list[str]]:
    """The rows of the tables printed in `text`, the header of each first, a cell wrapped over lines joined
    again (a row's first line names it in its first cell, unless its name wraps; a header's lines are all its own)."""
    rows: list[list[str]] = []
    header = False
    for line in text.splitlines():
        if "┃" in line and not header:  # a header's first line: a row of its own, the next lines join it
            rows.append([""] * (line.count("┃") + 1))
        header = "┃" in line
        if "│" not in line and "┃" not in line:
            continue
        cells = [c.strip() for c in line.replace("┃", "│").split("│")]
        wrapped = rows and rows[-1][0].endswith(("+", "-"))  # the row's name goes on
        if not header and (cells[0] and not wrapped or not rows or len(rows[-1]) != len(cells)):
            rows.append(cells)
        else:
            rows[-1] = [a + b if a.endswith(("+", "-")) else " ".join(filter(None, (a, b)))
                        for a, b in zip(rows[-1], cells)]
    return rows


#: the programs run under the doctor: name -> (doctor's options, the command after --); with `plain`, the same
#: program without the doctor. They run side by side (the CPU suite's 2 cores are mostly waiting on imports).
RUNS = {
    "torchrun": (["--steps", "2", "--skip", "2"],
                 [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", TRAIN]),
    "exit3": (["--steps", "2", "--skip", "1"], [sys.executable, TRAIN, "--exit", "3"]),
    "sigkill": (["--steps", "2", "--skip", "1"], [sys.executable, TRAIN, "--kill", "9@4"]),
    "sigterm": (["--steps", "3", "--skip", "1"], [sys.executable, TRAIN, "--kill", "15@3"]),
    "seconds": (["--seconds", "0.5", "--skip-seconds", "0.3"],
                [sys.executable, TRAIN, "--seconds", "1", "--group", "--until-trace"]),
}


@dataclass(frozen=True)
class Run:
    out: Path  # the doctor's --out
    json: Path  # its --json
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    """Every program of RUNS under `ccoverlap doctor`, in a subprocess each; `plain`: tests/data/doctor_train.py alone.
    In the `exit3` run the user has a PYTHONPATH with a sitecustomize of their own."""
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("doctor")
    user = tmp / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("print('user sitecustomize ran', flush=True)\n")
    started = {}
    for name, (options, cmd) in RUNS.items():
        env = clean_env() | ({"PYTHONPATH": str(user)} if name == "exit3" else {})
        argv = ["doctor", "--out", str(tmp / name), "--json", str(tmp / f"{name}.json"), *options, "--", *cmd]
        started[name] = subprocess.Popen([sys.executable, "-m", "ccoverlap", *argv], env=env, text=True,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    started["plain"] = subprocess.Popen([sys.executable, TRAIN], env=clean_env(), text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done = {}
    for name, proc in started.items():
        out, err = proc.communicate(timeout=180)
        done[name] = Run(tmp / name, tmp / f"{name}.json", proc.returncode, out, err)
    return done


def test_every_rank_of_torchrun_is_profiled_for_exactly_the_window(runs):
    run = runs["torchrun"]
    assert run.returncode == 0, run.stderr
    for rank in (0, 1):
        assert steps_in(run.out / f"rank{rank}_trace.json.gz") == ["ProfilerStep#1", "ProfilerStep#2"]
        r = record.read(run.out / f"rank{rank}_steps.jsonl")
        assert (r.rank, r.header["world_size"], r.cuda, r.complete) == (rank, 2, False, True)
        assert [s.step for s in r.steps] == [1, 2, 3, 4, 5, 6]
        assert [s.step for s in r.steps if s.warmup] == [2] and [s.step for s in r.steps if s.profiled] == [3, 4]
        assert r.steps[0].ms is None and all(s.ms > 0 for s in r.steps[1:]) and all(s.gpu_ms is None for s in r.steps)


def test_the_verdict_gives_each_ranks_step_times_on_the_cpu(runs):
    run = runs["torchrun"]
    rows = [row for row in table_rows(run.stdout) if "steps 3-4" in row]
    node = f"{socket.gethostname()} node 0"  # torchrun's one node
    assert [row[:4] for row in rows] == [["0", node, "6", "steps 3-4"], ["1", node, "6", "steps 3-4"]]
    assert all(float(ms) > 0 for row in rows for ms in row[4:7]) and {row[7] for row in rows} == {"-"}  # no GPU
    assert "overlap on the CPU timeline" in run.stdout and "levers that need a GPU" in run.stdout  # gloo's
    doc = json.loads(run.json.read_text())
    assert doc["exit_code"] == 0 and doc["analysis"] is None and doc["failures"] == []
    assert [r["rank"] for r in doc["cpu_analysis"]["strategies"][run.out.name]] == [0, 1]
    assert doc["provenance"]["commit"] and doc["provenance"]["version"]  # every recorded figure says where from
    times = {s["rank"]: s for s in doc["step_times"]}
    # step 6 (1 has no start; 5 follows the window's close)
    assert sorted(times) == [0, 1] and times[1]["outside_ms"]["n"] == 1
    assert [(times[r]["host"], times[r]["node"], times[r]["local_rank"]) for r in (0, 1)] == [
        (socket.gethostname(), 0, 0), (socket.gethostname(), 0, 1)]
    assert times[0]["profiled_steps"] == [3, 4]


def test_exit_code_passes_through_losses_unchanged_and_the_users_sitecustomize_runs(runs):
    run = runs["exit3"]
    assert run.returncode == 3, run.stderr
    assert "user sitecustomize ran" in run.stdout  # chained after the hook, from the user's own PYTHONPATH
    assert "ccoverlap doctor: the command ended with exit code 3; captured 1 trace(s)" in run.stdout
    assert steps_in(run.out / "rank0_trace.json.gz") == ["ProfilerStep#1", "ProfilerStep#2"]
    assert losses(run.stdout) == losses(runs["plain"].stdout) and len(losses(run.stdout)) == 6
    assert sorted(losses(runs["torchrun"].stdout)) == sorted(losses(run.stdout) * 2)  # each rank: the same gradients


def test_a_program_killed_after_the_window_keeps_its_trace_and_the_doctor_dies_of_the_signal(runs):
    run = runs["sigkill"]
    assert run.returncode == -signal.SIGKILL
    assert "the command ended with signal SIGKILL; captured 1 trace(s)" in run.stdout
    assert steps_in(run.out / "rank0_trace.json.gz") == ["ProfilerStep#1", "ProfilerStep#2"]
    assert [s.step for s in record.read(run.out / "rank0_steps.jsonl").steps] == [1, 2, 3, 4]


def test_sigterm_inside_the_window_writes_the_steps_recorded(runs):
    run = runs["sigterm"]
    assert run.returncode == -signal.SIGTERM
    r = record.read(run.out / "rank0_steps.jsonl")
    assert (r.recorded, r.complete, r.window) == (2, False, "cut short after 2 step(s)")
    assert steps_in(r.trace) == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]  # the third cut short
    assert any("cut short after 2 step(s)" in row for row in table_rows(run.stdout))


def test_seconds_profiles_a_window_of_a_program_without_an_optimizer(runs):
    run = runs["seconds"]
    assert run.returncode == 0, run.stderr
    r = record.read(run.out / "rank0_steps.jsonl")
    assert (r.steps, r.window, r.complete) == ((), "0.5 s", True)
    events = json.loads(gzip.decompress(r.trace.read_bytes()))["traceEvents"]
    ts = [e["ts"] for e in events if e.get("name") == "aten::mm"]  # the main thread's operators are recorded
    assert ts and 0.3e6 < max(ts) - min(ts) < 3e6


def test_a_missing_command_is_one_line_and_captures_nothing(tmp_path, capsys):
    assert main(["doctor", "--out", str(tmp_path / "out"), "--", "no-such-command-x"]) == 2
    err = capsys.readouterr().err
    assert err == "ccoverlap doctor: error: command not found: no-such-command-x (nothing was captured)\n"
    assert not (tmp_path / "out").exists()


def test_a_program_that_never_steps_an_optimizer_is_one_line_exit_2(tmp_path, capfd):
    assert main(["doctor", "--out", str(tmp_path / "out"), "--", sys.executable, "-c", "pass"]) == 2
    out, err = capfd.readouterr()
    assert f"captured nothing in {tmp_path / 'out'}" in out
    assert err.splitlines() == ["ccoverlap doctor: error: nothing was profiled: no Python process of the command "
                                "stepped a torch.optim optimizer (for a program without one, give --seconds)"]
    assert not (tmp_path / "out").exists()  # made by the doctor, left empty: removed


WRITE = "import json, os, pathlib; out = pathlib.Path(json.loads(os.environ['CCOVERLAP_DOCTOR'])['out']); "


@pytest.mark.parametrize(("program", "message"), [
    (WRITE + "(out / 'rank1_trace.json.gz').write_bytes(b'not gzip')",
     "rank1_trace.json.gz: skipped: truncated or corrupt gzip"),
    (WRITE + "(out / 'rank0_steps.jsonl').write_text('[1, 2]\\n')",
     "rank0_steps.jsonl: line 1: not a ccoverlap doctor step record"),
])
def test_a_foreign_or_truncated_file_is_one_line_naming_it_exit_2(program, message, tmp_path, capfd):
    assert main(["doctor", "--out", str(tmp_path / "out"), "--", sys.executable, "-c", program]) == 2
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("ccoverlap doctor: error: ") and message in err[0], err


@pytest.mark.parametrize(("argv", "message"), [
    (["--skip", "0"], "--skip=0 is out of range: valid 1..1000000000"),
    (["--steps", "0"], "--steps=0 is out of range: valid 1..1000"),
    (["--seconds", "-1"], "--seconds=-1 is out of range: valid 0..86400 seconds"),
    (["--skip-seconds", "3"], "--skip-seconds goes with --seconds"),
    (["--seconds", "2", "--steps", "4"], "--seconds profiles a time window; --steps and --skip count optimizer steps"),
    (["--json", "/"], "--json /: is a directory"),
])
def test_bad_options_are_one_line_before_the_program_starts(argv, message, tmp_path, capsys):
    marker = tmp_path / "ran"
    assert main(["doctor", "--out", str(tmp_path / "out"), *argv, "--", "touch", str(marker)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not marker.exists()


def test_an_out_folder_with_files_is_refused(tmp_path, capsys):
    (tmp_path / "old.txt").write_text("x")
    assert main(["doctor", "--out", str(tmp_path), "--", "true"]) == 2
    assert "holds files already; give a new or empty folder" in capsys.readouterr().err


def test_the_hook_environment_keeps_the_users_pythonpath_and_the_capture_config():
    cfg = DoctorConfig(out="/x", steps=4)
    env = startup.environ({startup.DOCTOR_ENV: cfg.capture().job()}, {"PYTHONPATH": "/a"})
    assert env["PYTHONPATH"].split(":") == [startup.HOOK_DIR, "/a"]
    assert CaptureConfig(**json.loads(env[startup.DOCTOR_ENV])) == DoctorConfig(out="/x", steps=4).capture()


def gpu_record(folder: Path, rank: int) -> None:
    """The step record a CUDA rank leaves, its window complete (steps 6-8 after a skip of 5)."""
    log = record.Log(folder, rank, {"world_size": 2, "skip": 5, "steps": 3})
    log.write({"window": "open", "cuda": True, "trace": log.trace.name})
    for step in range(1, 11):
        log.write({"step": step, "ms": None if step == 1 else 10.0 + step, "gpu_ms": None if step == 1 else 9.0 + step,
                   "profiled": 6 <= step <= 8, "warmup": step == 5})
    log.write({"window": "closed", "trace": log.trace.name, "recorded": 3, "complete": True})


def test_gpu_traces_are_analysed_and_reported(tmp_path, capsys):
    """The analysis half of the doctor on real H200 traces (two ranks of the `default` fixture)."""
    from ccoverlap.doctor.session import diagnose

    out = tmp_path / "out"
    for rank in (0, 1):
        gpu_record(out, rank)
        shutil.copy(H200 / f"rank{rank}_trace.json.gz", out / f"rank{rank}_trace.json.gz")
    cfg = DoctorConfig(out=str(out), json=str(tmp_path / "d.json"), report=str(tmp_path / "r.html"))
    assert diagnose(out, cfg, ["python", "train.py"], 0) == []
    shown = capsys.readouterr().out
    assert ("captured 2 trace(s) and the step times of rank(s) 0, 1" in shown
            and "overlap in the profiled steps" in shown)
    # steps 3, 4, 10: 13, 14, 20
    assert [row[:5] for row in table_rows(shown) if "steps 6-8" in row] == [
        ["0", "?", "10", "steps 6-8", "14.000"], ["1", "?", "10", "steps 6-8", "14.000"]]
    doc = json.loads((tmp_path / "d.json").read_text())
    assert [round(r["comp_comm_overlap_pct"], 2) for r in doc["analysis"]["ranks"]] == [94.11, 91.04]  # HTA's
    # steps 3, 4, 10: 12, 13, 19 (2 is the program's first timed step, 9 follows the window)
    assert doc["step_times"][0]["outside_gpu_ms"]["median"] == 13.0
    assert (tmp_path / "r.html").exists() and doc["analysis"]["report"][0] == str(tmp_path / "r.html")


def test_nothing_profiled_says_to_lower_skip_when_the_program_stopped_before_the_window(tmp_path):
    from ccoverlap.doctor.session import _nothing

    log = record.Log(tmp_path, 0, {"world_size": 1, "skip": 5, "steps": 3})
    for step in (1, 2, 3):
        log.write({"step": step, "ms": 1.0, "gpu_ms": None, "profiled": False, "warmup": False})
    (r,) = record.read_all(tmp_path)[0]
    assert r.window == "not reached"
    assert _nothing([r], DoctorConfig(skip=5), tmp_path) == ("nothing was profiled: the program made 3 optimizer "
                                                             "step(s); the window opens after step 5 (lower --skip)")


def test_an_interrupted_run_says_so_on_the_terminal_and_in_its_json(tmp_path, capsys):
    """The doctor passed Ctrl-C on to the command: what it writes from the steps recorded says it was interrupted."""
    from ccoverlap.doctor.session import diagnose

    out = tmp_path / "out"
    gpu_record(out, 0)
    cfg = DoctorConfig(out=str(out), json=str(tmp_path / "d.json"))
    diagnose(out, cfg, ["python", "train.py"], -signal.SIGINT, "SIGINT")
    assert ("ccoverlap doctor: interrupted by SIGINT: the command ended with signal SIGINT; captured"
            in capsys.readouterr().out)
    assert json.loads((tmp_path / "d.json").read_text())["interrupted"] == "SIGINT"
    diagnose(out, cfg, ["python", "train.py"], 0)
    assert "interrupted by" not in capsys.readouterr().out
    assert json.loads((tmp_path / "d.json").read_text())["interrupted"] is None


def test_the_record_leaves_out_a_line_cut_short_and_refuses_a_foreign_one(tmp_path):
    log = record.Log(tmp_path, 3, {"world_size": 4, "skip": 1, "steps": 1})
    log.write({"step": 1, "ms": None, "gpu_ms": None, "profiled": False, "warmup": True})
    path = tmp_path / "rank3_steps.jsonl"
    with path.open("a") as f:
        f.write('{"step": 2, "ms"')  # the process was killed in the middle of a write
    assert [s.step for s in record.read(path).steps] == [1]
    second = record.Log(tmp_path, 3, {})  # another process of rank 3: a file of its own
    assert second.trace.name.startswith("rank3_pid") and path.read_text().count("\n") == 2
    path.write_text(path.read_text().replace('"step": 1', '"step": "one"').replace('{"step"', '[{"step"', 1))
    with pytest.raises(Exception, match=r"rank3_steps.jsonl: line 2: not a ccoverlap doctor step record"):
        record.read(path)


def test_the_programs_own_step_leaves_out_its_warm_up_and_the_step_after_each_window(tmp_path):
    """Steps 1-8: 1 untimed, 2 the program's warm-up (9 ms), 3-4 steady (4 ms), 5 the profiler's warm-up, 6 profiled,
    7 the step after the window (8 ms: the export left the host and GPU cold), 8 steady: the program's step is 4 ms
    (steps 3, 4, 8), not the 8.5 ms median of every step outside the window."""
    log = record.Log(tmp_path, 0, {"world_size": 1, "skip": 5, "steps": 1})
    for step, ms, profiled, warmup in [(1, None, False, False), (2, 9.0, False, False), (3, 4.0, False, False),
                                       (4, 4.0, False, False), (5, 20.0, False, True), (6, 6.0, True, False),
                                       (7, 8.0, False, False), (8, 4.0, False, False)]:
        log.write({"step": step, "ms": ms, "gpu_ms": ms, "profiled": profiled, "warmup": warmup})
    rec = record.read(tmp_path / "rank0_steps.jsonl")
    assert [s.step for s in rec.steps if s.after_window] == [7]
    assert [s.step for s in rec.steps if s.outside] == [1, 2, 3, 4, 8]
    assert [s.step for s in rec.steady] == [1, 3, 4, 8]
    assert rec.summary()["outside_gpu_ms"]["median"] == 4.0 and rec.summary()["outside_gpu_ms"]["n"] == 3


def test_the_first_optimizer_to_step_sets_the_pace(tmp_path):
    """Two optimizers stepped each iteration (a GAN's) are one step; a replaced optimizer hands the pace on."""
    pytest.importorskip("torch")
    from ccoverlap.doctor.capture import Capture

    capture = Capture(DoctorConfig(out=str(tmp_path), skip=100).capture())

    class Opt:
        pass

    a, b = Opt(), Opt()
    for _ in range(3):
        for opt in (a, b):
            capture.pre_step(opt, (), {})
            capture.post_step(opt, (), {})
    del a
    capture.post_step(b, (), {})  # the leader is gone: b leads now
    assert capture.done == 4
    assert [s.step for s in record.read(tmp_path / "rank0_steps.jsonl").steps] == [1, 2, 3, 4]


def run_doctor(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`ccoverlap doctor --out tmp/out --json tmp/d.json ARGV` in a subprocess; its result and its JSON."""
    out = subprocess.run([sys.executable, "-m", "ccoverlap", "doctor", "--out", str(tmp_path / "out"),
                          "--json", str(tmp_path / "d.json"), *argv], env=clean_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out, json.loads((tmp_path / "d.json").read_text())


@pytest.mark.gpu
def test_on_gpus_every_rank_is_analysed_with_its_waits_and_its_steps_timed_by_cuda_events(tmp_path):
    import torch

    ranks = min(2, torch.cuda.device_count())
    # 4 more than before the alone window: its warm-up and 3 steps; steady: 12-14 (11 follows the alone window, 2 is
    # the program's first timed step)
    out, doc = run_doctor(tmp_path, "--steps", "3", "--skip", "3", "--report", str(tmp_path / "r.html"), "--",
                          sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
                          TRAIN, "--cuda", "--steps", "14")
    analysed = doc["analysis"]["ranks"]
    assert sorted(r["rank"] for r in analysed) == list(range(ranks)) and all(r["kernels"] > 0 for r in analysed)
    if ranks == 2:  # NCCL's kernels beside the MLP's
        assert all(r["comp_comm_overlap_pct"] is not None for r in analysed)
    for times in doc["step_times"]:
        assert times["cuda"] is True and times["outside_gpu_ms"]["n"] == 3 and times["outside_gpu_ms"]["median"] > 0
        events = json.loads(gzip.decompress(Path(times["trace"]).read_bytes()))["traceEvents"]
        assert any(e.get("cat") == "cuda_sync" for e in events)  # CUDA sync events on (loss.item() waits each step)
    assert (tmp_path / "r.html").exists() and "overlap in the profiled steps" in out.stdout


@pytest.mark.gpu
def test_on_a_gpu_a_seconds_window_records_the_kernels_the_main_thread_launches(tmp_path):
    out, doc = run_doctor(tmp_path, "--seconds", "0.5", "--skip-seconds", "0.5", "--",
                          sys.executable, TRAIN, "--cuda", "--seconds", "1", "--until-trace")
    (rank,) = doc["analysis"]["ranks"]
    assert rank["kernels"] > 10 and doc["step_times"][0]["window"] == "0.5 s"


def test_whatever_goes_wrong_in_the_capture_is_one_line_never_the_programs_step(tmp_path, capfd):
    pytest.importorskip("torch")
    from ccoverlap.doctor.capture import Capture

    class Opt:
        pass

    opt = Opt()
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    unwritable = Capture(DoctorConfig(out=str(blocked), skip=100).capture())
    unwritable.post_step(opt, (), {})
    assert not unwritable.enabled and "cannot write in" in capfd.readouterr().err

    broken = Capture(DoctorConfig(out=str(tmp_path / "out"), skip=100).capture())
    broken.post_step(opt, (), {})
    broken.log.write = lambda line: 1 / 0
    broken.post_step(opt, (), {})  # the program's step goes on
    broken.post_step(opt, (), {})
    err = capfd.readouterr().err
    assert not broken.enabled and broken.done == 2 and err.count("\n") == 1
    assert err.startswith("ccoverlap doctor: the capture stopped: ZeroDivisionError")


def test_a_world_emulated_in_one_process_expects_no_other_records(tmp_path):
    """The bench's emulation (and any fake group) keeps its store in the process: its record claims rank 0 of 8,
    and the doctor and the tuner must not wait for seven processes that do not exist; a real world still does."""
    import torch.distributed as dist

    from ccoverlap.doctor import capture

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        me = capture._identity()
    finally:
        dist.destroy_process_group()
    assert me.in_process and me.header()["in_process"] is True
    emulated = record.Log(tmp_path / "emulated", 0, {"world_size": 8, "in_process": True, "skip": 1, "steps": 1})
    emulated.write({"step": 1, "ms": 1.0, "gpu_ms": None, "profiled": False, "warmup": True})
    assert record.missing(record.read_all(tmp_path / "emulated")[0]) == ([], 0)
    real = record.Log(tmp_path / "real", 0, {"world_size": 8, "in_process": False, "skip": 1, "steps": 1})
    real.write({"step": 1, "ms": 1.0, "gpu_ms": None, "profiled": False, "warmup": True})
    assert record.missing(record.read_all(tmp_path / "real")[0]) == ([1, 2, 3, 4, 5, 6, 7], 8)


def test_the_fingerprints_rounding_is_the_coarsest_parameters_and_is_read_back(tmp_path):
    import torch

    from ccoverlap.doctor import capture

    fine = torch.optim.SGD([torch.nn.Parameter(torch.ones(3))], lr=0.1)
    mixed = torch.optim.SGD([torch.nn.Parameter(torch.ones(3)),
                             torch.nn.Parameter(torch.ones(2, dtype=torch.bfloat16))], lr=0.1)
    assert capture.rounding(fine) == 2.0 ** -24 and capture.rounding(mixed) == 2.0 ** -8
    path = tmp_path / "rank0_steps.jsonl"
    lines = [{"format": record.FORMAT, "rank": 0, "pid": 1},
             {"step": 1, "ms": 1.0, "gpu_ms": None, "profiled": False, "warmup": False},
             {"fingerprint": [3.0], "rounding": 2.0 ** -24, "after_step": 1}]
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    got = record.read(path)
    assert got.fingerprint == (3.0,) and got.rounding == 2.0 ** -24
    lines[-1].pop("rounding")  # a record written before the rounding was kept: no floor
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    assert record.read(path).rounding is None
