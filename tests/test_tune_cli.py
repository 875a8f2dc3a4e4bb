"""`ccoverlap tune` end to end on the CPU, on a small training program with two environment knobs: one makes
it faster and keeps its result (kept), one changes its result (refused); bad input; Ctrl-C."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_interposer import foreground

from ccoverlap.cli import main
from ccoverlap.control import policy as tuned
from ccoverlap.util.errors import UsageError

TRAIN = Path(__file__).parent / "data" / "doctor_train.py"
PROGRAM = [sys.executable, str(TRAIN), "--steps", "100000"]


def tune(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ccoverlap", "tune", *args], capture_output=True, text=True,
                          env=os.environ | (env or {}), timeout=kw.pop("timeout", 300), **kw)


def test_a_faster_knob_is_kept_and_one_that_changes_the_result_is_refused(tmp_path, capfd, monkeypatch):
    out = tmp_path / "t"
    # the budget is a cap (the verdict ends the search sooner): 6 minutes leave a loaded machine time to confirm
    run = tune("--budget", "6", "--skip", "2", "--steps", "5", "--out", str(out),
               "--env", "DOCTOR_TRAIN_SLEEP_MS=2", "--env", "DOCTOR_TRAIN_LR=0.1", "--", *PROGRAM,
               env={"DOCTOR_TRAIN_SLEEP_MS": "80"}, timeout=480)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads((out / "tune.json").read_text())
    assert doc["decision"] == "tuned" and doc["best"]["knobs"] == {"DOCTOR_TRAIN_SLEEP_MS": "2"}
    assert doc["comparison"]["verdict"] == "faster"  # the decision, not how much faster a loaded machine made it
    assert doc["settings"]["DOCTOR_TRAIN_SLEEP_MS=2"]["runs"][1] >= 3  # confirmed on repeated runs
    lr = [t for t in doc["trials"] if t["knobs"] == {"DOCTOR_TRAIN_LR": "0.1"}]
    assert lr and all(t["refused"] and "changed the result" in t["refused"] for t in lr)
    assert all(t["clock"] == "host" for t in doc["trials"])
    assert doc["provenance"]["commit"] and doc["command"] == PROGRAM
    assert (out / "tune.png").stat().st_size > 5000
    assert "DOCTOR_TRAIN_LR=0.1" in run.stdout and "CHANGED" in run.stdout and "<- kept" in run.stdout
    # a knob of the user's own (tune --env), no tuning variable: the file loads where the user allows it by name
    with pytest.raises(UsageError, match="knob DOCTOR_TRAIN_SLEEP_MS is not a tuning variable"):
        tuned.load(out / "policy.json")
    policy = tuned.load(out / "policy.json", allow_env=["DOCTOR_TRAIN_SLEEP_MS"])
    assert dict(policy.knobs) == {"DOCTOR_TRAIN_SLEEP_MS": "2"} and policy.meta["decision"] == "tuned"
    assert f"run --config {out / 'policy.json'} --allow-env DOCTOR_TRAIN_SLEEP_MS -- " in run.stdout  # the apply line
    monkeypatch.setenv("DOCTOR_TRAIN_SLEEP_MS", "80")
    capfd.readouterr()
    assert main(["run", "--config", str(out / "policy.json"), "--allow-env", "DOCTOR_TRAIN_SLEEP_MS", "--",
                 sys.executable, "-c", "import os; print(os.environ['DOCTOR_TRAIN_SLEEP_MS'])"]) == 0
    assert capfd.readouterr().out.strip() == "2"


def test_on_the_cpu_without_knobs_the_default_is_kept_after_the_baseline(tmp_path):
    # a budget a loaded CI machine cannot outrun: with no candidate, the baseline is all that runs
    run = tune("--budget", "5", "--skip", "2", "--steps", "3", "--out", str(tmp_path / "t"), "--", *PROGRAM)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert doc["decision"] == "default kept" and "no lever applies here" in doc["reason"]
    assert "priority: needs CUDA or ROCm" in doc["reason"] and "above" not in doc["reason"]  # the file says why
    assert [t["phase"] for t in doc["trials"]] == ["baseline", "baseline"]
    assert "not tried: priority: needs CUDA" in run.stdout


def test_a_command_failing_under_the_default_stops_with_its_error(tmp_path):
    run = tune("--budget", "1", "--skip", "2", "--steps", "3", "--out", str(tmp_path / "t"), "--",
               sys.executable, str(TRAIN), "--steps", "3", "--exit", "3")
    assert run.returncode == 1
    assert "fails under the default" in run.stderr and "exit code 3" in run.stderr
    assert not (tmp_path / "t" / "tune.json").exists()


def test_too_few_steps_say_what_a_trial_needs(tmp_path):
    run = tune("--budget", "1", "--skip", "2", "--steps", "5", "--out", str(tmp_path / "t"), "--",
               sys.executable, str(TRAIN), "--steps", "4")
    assert run.returncode == 1 and "made 4 optimizer step(s)" in run.stderr and "--skip 2 + --steps 5" in run.stderr


@pytest.mark.parametrize("args,message", [
    (["--levers", "nope"], "unknown lever 'nope'"),
    (["--env", "NCCL_ALGO"], "--env 'NCCL_ALGO': write NAME=V1,V2"),
    (["--budget", "0.1"], "--budget 0.1: valid 0.5..10080"),
    (["--steps", "2"], "--steps=2 is out of range"),
    (["--levers", "priority"], "--levers priority: needs CUDA"),
    (["--order", "best"], "--order 'best': valid doctor or registry"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    run = tune(*args, "--out", str(tmp_path / "t"), "--", *PROGRAM)
    assert run.returncode == 2 and message in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
    assert not (tmp_path / "t").exists()


def test_no_command_and_a_missing_command_are_refused(tmp_path):
    assert "give the command to run after --" in tune("--out", str(tmp_path / "a")).stderr
    run = tune("--out", str(tmp_path / "b"), "--", "no-such-program-xyz")
    assert run.returncode == 2 and "command not found: no-such-program-xyz" in run.stderr


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGHUP, -signal.SIGHUP)],
                         ids=["ctrl-c", "hangup"])
def test_a_stop_ends_the_trial_and_writes_what_it_has(signum, code, tmp_path):
    out = tmp_path / "t"
    proc = subprocess.Popen([sys.executable, "-m", "ccoverlap", "tune", "--budget", "5", "--skip", "2", "--steps", "5",
                             "--out", str(out), "--env", "DOCTOR_TRAIN_SLEEP_MS=200", "--", *PROGRAM],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=foreground,
                            env=os.environ | {"DOCTOR_TRAIN_SLEEP_MS": "100"})
    deadline = time.monotonic() + 120
    steps = out / "trial002-default" / "rank0_steps.jsonl"
    while not (steps.exists() and steps.read_text().count("\n") >= 3) and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = json.loads(steps.read_text().splitlines()[0])["pid"]
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr[-2000:]
    doc = json.loads((out / "tune.json").read_text())
    assert doc["interrupted"] == signum.name and doc["decision"] == "default kept"
    said = f"default kept: interrupted by {signum.name} before any candidate ran"  # not "no candidate fitted"
    assert doc["reason"] == said and said in stdout and f"interrupted by {signum.name}: the verdict" in stdout
    written = json.loads((out / "policy.json").read_text())
    assert written["reason"] == said and written["interrupted"] == signum.name
    deadline = time.monotonic() + 30  # the trial's program went with it (a loaded machine reaps it late)
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_trial_folder_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, capsys):
    """A full disk under --out: one line, exit 2, no traceback (the runner's mkdir made to fail)."""
    from ccoverlap.tune import trial

    def full(self, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trial.Path, "mkdir", full)
    monkeypatch.setattr("ccoverlap.control.levers.Host.detect",
                        classmethod(lambda cls: __import__("ccoverlap.control.levers").control.levers.Host("cpu")))
    assert main(["tune", "--out", str(tmp_path / "t"), "--", *PROGRAM]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (err[-1].endswith("cannot write a trial's record: No space left on device") and
            "Traceback" not in "".join(err))
