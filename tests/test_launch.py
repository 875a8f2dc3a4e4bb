"""The one launch path (control/launch.py, control/procs.py, control/keeper.py): a command gets exactly the
variables of its setting, runs as it was measured (a tune trial and `run --config` of its policy give it the
same environment), ends with ccoverlap however ccoverlap ends, and a failure says what failed. CPU only."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccoverlap.control import interposer, launch, levers, procs, startup
from ccoverlap.control.policy import TunedPolicy, for_run
from ccoverlap.tune.trial import Runner

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

H200 = levers.Host("cuda", (2, 28, 9), (9, 0), sm_carveout=True, green_contexts=True, interposer=True)
DUMP = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
#: what the caller's environment may hold that a tuned policy must not let through
STRAY = {"CCOVERLAP_MODE": "pad", "CCOVERLAP_PAD_BYTES": "4096", "CCOVERLAP_POLICY": "/nowhere.json",
         startup.STARTUP_ENV: '{"sm_carveout": "8"}', "LD_PRELOAD": interposer.library_path(), "USER_KNOB": "kept"}


def _instrument_out(env: dict, hook: bool) -> dict:
    """A trial's environment without what it is observed with: the capture's job variable, the hook on PYTHONPATH
    unless the policy's start-up calls need it (`hook`), and where the interposer writes its stats (an output)."""
    env = {k: v for k, v in env.items() if k != startup.DOCTOR_ENV} | {interposer.BY_KEY["stats"].env: ""}
    path = [p for p in env.pop("PYTHONPATH", "").split(os.pathsep) if p and (hook or p != startup.HOOK_DIR)]
    return env | ({"PYTHONPATH": os.pathsep.join(path)} if path else {})


@pytest.mark.parametrize("policy", [
    TunedPolicy(),  # the default: nothing nobody asked for
    TunedPolicy.of("priority+nccl-ctas=4", {"NCCL_ALGO": "Ring"}),  # variables only: no interposer
    TunedPolicy.of("shape+sm-carveout=16", {"NCCL_ALGO": "Tree"}, comm_regex="^my_allreduce"),  # interposer, hook
], ids=lambda p: p.name)
def test_run_config_gives_the_command_the_variables_of_the_trial_it_came_from(policy, tmp_path, monkeypatch):
    monkeypatch.setattr(levers.Host, "detect", lambda: H200)
    base = dict(os.environ) | STRAY
    runner = Runner([sys.executable, "-c", DUMP], base, tmp_path, skip=1, steps=3, comm_regex=policy.comm_regex)
    trial = runner.launch(policy, tmp_path, profile=False).environ(base)
    saved = runner.policy(policy).save(tmp_path / "policy.json")
    applied = for_run(str(saved), None, {}).environ(base)
    assert _instrument_out(trial, bool(policy.startup)) == applied  # the same command, as it was measured
    added = {k: v for k, v in applied.items() if base.get(k) != v}
    removed = set(base) - set(applied)
    if not policy.levers and not policy.knobs:  # no multicast switch; the interposer observing, as the tuner measured
        assert set(added) <= {"LD_PRELOAD", interposer.POLICY_ENV} | {f.env for f in interposer.FIELDS}
        assert interposer.parse(applied)["mode"] == "off"
        assert removed == {startup.STARTUP_ENV}  # the caller's interposer variables are blanked, its job dropped
    if policy.policy:
        assert interposer.parse(applied) == interposer.parse(  # the whole policy: nothing of the caller's
            {f.env: str(v) for f in interposer.FIELDS
             if (v := {**interposer.parse({}), **policy.policy}[f.key]) is not None})
        assert applied["CCOVERLAP_COMM"] == "^my_allreduce" and applied["CCOVERLAP_PAD_BYTES"] == ""
    else:  # pass-through: nothing of the caller's policy, nothing padded or hinted
        assert applied["LD_PRELOAD"].split(":")[0] == interposer.library_path()
        assert {k: v for k, v in interposer.parse(applied).items() if v is not None} == {
            k: v for k, v in interposer.parse({}).items() if v is not None}
    assert all(k in base for k in removed) and applied["USER_KNOB"] == "kept"
    assert set(added) <= set(policy.env) | {f.env for f in interposer.FIELDS} | {
        interposer.POLICY_ENV, "LD_PRELOAD", startup.STARTUP_ENV, "PYTHONPATH"}


def test_the_product_sets_no_multicast_variable():
    src = Path(launch.__file__).parents[1]
    offenders = [p for p in src.rglob("*.py") if "NCCL_NVLS_ENABLE" in p.read_text() or "MULTICAST" in p.read_text()]
    assert offenders == []


def test_the_in_process_half_sets_the_variables_and_makes_the_calls(monkeypatch):
    calls = []
    monkeypatch.setattr(levers, "STARTUP_CALLS", {"sm_carveout": calls.append})
    env: dict[str, str] = {}
    launch.in_process(TunedPolicy.of("priority+sm-carveout=16").setting(), env)
    assert env == {"TORCH_NCCL_HIGH_PRIORITY": "1"} and calls == [16]


# --- the keeper ---------------------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in "ZX"


def _until(what, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not what():
        time.sleep(0.05)
    return what()


#: a command that leaves a process in a session of its own (as torchrun's workers are) and one in its group,
#: writes their pids, then waits
SPAWNER = """
import subprocess, sys, time
a = subprocess.Popen(["sleep", "1000"], start_new_session=True)
b = subprocess.Popen(["sleep", "1000"])
open(sys.argv[1], "w").write(f"{a.pid} {b.pid}")
time.sleep(1000 if sys.argv[2] == "wait" else 0)
"""


def _child(argv, **io) -> procs.Child:
    return procs.Child(argv, dict(os.environ), **io)


def test_what_a_command_leaves_running_is_stopped_when_it_ends(tmp_path):
    pids = tmp_path / "pids"
    with _child([sys.executable, "-c", SPAWNER, str(pids), "end"]) as child:
        assert child.wait(60) == 0
    left = [int(p) for p in pids.read_text().split()]
    assert not any(_alive(p) for p in left)


def test_the_keeper_says_how_the_command_ended():
    assert _child(["sh", "-c", "exit 3"]).wait(60) == 3
    assert _child(["sh", "-c", "kill -SEGV $$"]).wait(60) == -signal.SIGSEGV
    missing = _child(["no-such-program-xyz"])
    assert missing.wait(60) == 127 and missing.error == "no-such-program-xyz: No such file or directory"


def test_a_stopped_child_gets_the_signal_then_is_killed(tmp_path):
    ready = tmp_path / "ready"
    ignoring = _child([sys.executable, "-c", "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, "
                       "signal.SIG_IGN); pathlib.Path(sys.argv[1]).write_text('1'); time.sleep(1000)", str(ready)])
    assert _until(ready.exists, 60)
    assert ignoring.stop(signal.SIGTERM, grace_s=0.5) == -signal.SIGKILL  # it ignored SIGTERM: killed after the grace


@pytest.mark.parametrize("tool", [
    ["run", "--"],
    ["doctor", "--skip", "1", "--out", "{out}", "--"],
])
def test_a_killed_ccoverlap_leaves_nothing_running(tool, tmp_path):
    """SIGKILL to `ccoverlap run` or `ccoverlap doctor` (no clean-up of its own at all): its command, what the
    command started in its process group and in a session of its own, all end."""
    pids = tmp_path / "pids"
    argv = [a.format(out=tmp_path / "out") for a in tool]
    cli = subprocess.Popen([sys.executable, "-m", "ccoverlap", *argv, sys.executable, "-c", SPAWNER, str(pids), "wait"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert _until(lambda: pids.exists() and len(pids.read_text().split()) == 2, 60), cli.stderr.read1()
        left = [int(p) for p in pids.read_text().split()]
        assert all(_alive(p) for p in left)
        cli.kill()
        cli.wait(10)
        assert _until(lambda: not any(_alive(p) for p in left))
    finally:
        os.killpg(cli.pid, signal.SIGKILL) if cli.poll() is None else None


def test_run_forwards_a_signal_and_dies_of_it_as_its_command_did(tmp_path):
    ready = tmp_path / "ready"
    prog = (f"import pathlib, time; pathlib.Path({str(ready)!r}).write_text('1'); time.sleep(1000)")
    cli = subprocess.Popen([sys.executable, "-m", "ccoverlap", "run", "--", sys.executable, "-c", prog],
                           stderr=subprocess.PIPE, text=True)
    assert _until(ready.exists, 60)
    cli.send_signal(signal.SIGTERM)
    assert cli.wait(30) == -signal.SIGTERM and cli.stderr.read() == ""


# --- what a failure says -------------------------------------------------------------------------------

TORCHRUN_FAILED = """\
[W1203 10:00:00.000] torch/distributed/elastic: some warning
Traceback (most recent call last):
  File "/work/train.py", line 12, in <module>
    model.module.fit()
AttributeError: 'Linear' object has no attribute 'fit'
E1203 10:00:01.000 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: 1) local_rank: 0
Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 1234)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_a_failure_names_the_ranks_own_error_not_torchruns_summary():
    why = procs.why_failed(TORCHRUN_FAILED, 12)
    assert why.splitlines()[-1] == "AttributeError: 'Linear' object has no attribute 'fit'" and "Root Cause" not in why
    assert procs.why_failed("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"x\"\n"
                            "[rank1]: ValueError: bad\n", 2) == "[rank1]:   File \"x\"\n[rank1]: ValueError: bad"
    assert procs.why_failed("one\n\ntwo\nthree\n", 2) == "two\nthree"  # no traceback: the last lines


def test_a_tune_trial_of_a_failing_torchrun_program_shows_the_ranks_error(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text("import torch\nmodel = torch.nn.Linear(2, 2)\nmodel.fit()\n")
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("no torchrun beside this python")
    runner = Runner([str(torchrun), "--nproc-per-node", "1", str(script)], dict(os.environ), tmp_path / "t", 1, 3)
    trial = runner(TunedPolicy(), "baseline", 120)
    assert trial.status == "failed" and trial.error.startswith("ended with exit code 1")
    assert trial.error.splitlines()[-1] == "AttributeError: 'Linear' object has no attribute 'fit'"
    assert json.loads((trial.folder / "trial.json").read_text())["status"] == "failed"


def test_run_passes_signals_on_and_tells_the_caller_which(monkeypatch):
    """Launch.run's `received`: the doctor says a run was interrupted from it."""
    import threading

    received: list[int] = []
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    code = launch.Launch(whole=False).run([sys.executable, "-c", "import time; time.sleep(60)"], received=received)
    assert received == [signal.SIGINT] and code in (-signal.SIGINT, 1)  # Python: dies of it (or exits 1)
