"""`ccoverlap run --strategy`: a combination of levers applied to an unmodified program (its variables,
its interposer policy fields, its start-up calls through the sitecustomize hook), and refused in one line
where it cannot be applied. CPU only: the host is the H200's where a lever needs CUDA."""
import json
import os
import sys

import pytest
from test_interposer import clean_env, run_cli

from ccoverlap.control import levers, startup
from ccoverlap.cli import main
from ccoverlap.control.interposer import library_path, parse
from ccoverlap.control.policy import TunedPolicy

H200 = levers.Host("cuda", (2, 28, 9), (9, 0), sm_carveout=True, green_contexts=True, interposer=True)
PRINT_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


@pytest.fixture
def on_h200(monkeypatch):
    monkeypatch.setattr(levers.Host, "detect", lambda: H200)
    for var in ("TORCH_NCCL_HIGH_PRIORITY", "NCCL_MAX_CTAS", "PYTHONPATH", startup.STARTUP_ENV, "LD_PRELOAD"):
        monkeypatch.delenv(var, raising=False)


def child_env(capfd, *argv) -> dict:
    assert main(["run", *argv, "--", sys.executable, "-c", PRINT_ENV]) == 0
    return json.loads(capfd.readouterr().out)


def test_the_levers_variables_and_policy_fields_reach_the_program(on_h200, capfd):
    env = child_env(capfd, "--strategy", "priority+shape+nccl-ctas=8")
    assert (env["TORCH_NCCL_HIGH_PRIORITY"], env["NCCL_MAX_CTAS"], env["CCOVERLAP_MODE"]) == ("1", "8", "auto")
    assert env["LD_PRELOAD"].split()[0] == library_path() and startup.STARTUP_ENV not in env
    # agreeing options
    env = child_env(capfd, "--strategy", "carveout-hint=60", "--carveout", "60", "--stats", "s.json")
    assert env["CCOVERLAP_CARVEOUT"] == "60" and env["CCOVERLAP_STATS"] == os.path.abspath("s.json")
    assert "CCOVERLAP_MODE" not in env and "TORCH_NCCL_HIGH_PRIORITY" not in env
    assert "CCOVERLAP_MODE" not in child_env(capfd, "--strategy", "default")  # no lever: nothing set


@pytest.mark.parametrize(("argv", "message"), [
    (["--strategy", "shape", "--mode", "pad", "--pad-bytes", "64"],
     "--mode pad disagrees with --strategy shape, which sets mode auto"),
    (["--strategy", "carveout-hint", "--carveout", "60"],
     "--carveout 60 disagrees with --strategy carveout-hint, which sets carveout 100"),
    (["--strategy", "green"], "--strategy green: green: needs the compute on a green-context stream"),
    (["--strategy", "no-overlap"], "--strategy no-overlap: the bench's baseline"),
    (["--strategy", "warp-drive"], "unknown lever 'warp-drive': valid priority, shape"),
    (["--strategy", "nccl-threads=100"], "nccl-threads=100: valid 64..512 in steps of 32"),
])
def test_what_cannot_be_applied_is_one_line_exit_2(argv, message, on_h200, capsys):
    assert main(["run", *argv, "--", "true"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(("combo", "message"), [
    ("priority", "--strategy priority: priority: needs CUDA or ROCm"),
    ("nccl-cluster", "--strategy nccl-cluster: nccl-cluster: needs CUDA"),
    ("sm-carveout", "--strategy sm-carveout: sm-carveout: needs CUDA"),
])
def test_levers_that_do_not_apply_on_this_cpu_machine_are_refused(combo, message, capsys):
    assert refused(capsys, "--strategy", combo) == [f"ccoverlap run: error: {message}"]


def refused(capsys, *argv: str) -> list[str]:
    """`ccoverlap run ARGV -- true` on this machine, in this process (a refusal starts nothing): its stderr's
    lines, the exit code checked to be 2."""
    assert main(["run", *argv, "--", "true"]) == 2
    return capsys.readouterr().err.strip().splitlines()


def fake_torch_and_user_site(tmp_path) -> str:
    """A folder holding a stand-in `torch` (so the test needs no real one) and a user's own sitecustomize."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("IMPORTED = True\n")
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITECUSTOMIZE_RAN = True\n")
    return str(tmp_path)


#: the program: records the start-up calls instead of making them, on a GPU of 132 SMs, then imports torch
PROGRAM = """
import builtins, json
from ccoverlap.gpu import cuda_driver
from ccoverlap.control import levers
calls = []
levers.STARTUP_CALLS = {"sm_carveout": calls.append}
class Driver:
    def device(self, i): return i
    def device_attribute(self, attr, device): return 132
cuda_driver.driver = lambda: Driver()
before = list(calls)
import torch
print(json.dumps({"before": before, "after": calls, "user_site": getattr(builtins, "USER_SITECUSTOMIZE_RAN", False)}))
"""


@pytest.mark.parametrize(("combo", "env", "calls"), [
    ("sm-carveout=16", {}, [16]),
    ("sm-carveout+priority", {}, [24]),  # auto: NCCL's 24 channels, in units of 8
    ("sm-carveout", {"NCCL_MAX_CTAS": "4"}, [8]),  # auto under the program's NCCL knobs
])
def test_start_up_calls_are_made_as_the_program_imports_torch(combo, env, calls, on_h200, capfd, tmp_path, monkeypatch):
    user = fake_torch_and_user_site(tmp_path)
    monkeypatch.setenv("PYTHONPATH", user)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["run", "--strategy", combo, "--", sys.executable, "-c", PROGRAM]) == 0
    out, err = capfd.readouterr()
    seen = json.loads(out)
    assert seen["before"] == [] and seen["after"] == calls  # at `import torch`, not before
    assert seen["user_site"] is True  # the user's own sitecustomize still ran (chained)
    assert err == ""


def test_a_start_up_call_that_fails_says_so_and_the_program_runs_on(tmp_path):
    user = fake_torch_and_user_site(tmp_path)
    env = clean_env() | startup.environ({startup.STARTUP_ENV: {"sm_carveout": "auto"}}, {"PYTHONPATH": user})
    import subprocess

    program = ("from ccoverlap.gpu import cuda_driver; cuda_driver.driver = lambda: None\n"
               "import torch; print('ran', torch.IMPORTED)")
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ran True"
    assert (out.stderr.count("\n") == 1
            and "ccoverlap: start-up levers {\"sm_carveout\": \"auto\"} not applied in pid" in out.stderr)
    assert "no CUDA driver" in out.stderr


def test_the_hook_goes_first_on_pythonpath_once_keeping_the_users():
    job = {startup.STARTUP_ENV: {"sm_carveout": "8"}}
    env = startup.environ(job, {"PYTHONPATH": f"/a{os.pathsep}/b"})
    assert env == {startup.STARTUP_ENV: '{"sm_carveout": "8"}',
                   "PYTHONPATH": os.pathsep.join([startup.HOOK_DIR, "/a", "/b"])}
    assert startup.environ(job, env)["PYTHONPATH"] == env["PYTHONPATH"]
    assert os.path.isfile(os.path.join(startup.HOOK_DIR, "sitecustomize.py"))


def test_an_explicit_carveout_reaches_torch_in_the_program(on_h200, capfd):
    """End to end with the real torch: the call is made at `import torch` (no GPU needed for an explicit N)."""
    pytest.importorskip("torch")
    program = "import torch; print(torch._C._get_sm_carveout_experimental())"
    assert main(["run", "--strategy", "sm-carveout=16", "--", sys.executable, "-c", program]) == 0
    out, err = capfd.readouterr()
    assert out.strip() == "16" and "ccoverlap" not in err  # torch warns that the carveout is experimental


@pytest.mark.gpu
def test_sm_carveout_auto_reaches_torch_as_the_sms_nccls_ctas_need(capfd):
    from ccoverlap.gpu import cuda_driver as cu

    drv = cu.driver()
    sms = drv.device_attribute(cu.ATTR_MULTIPROCESSOR_COUNT, drv.device(0))
    program = "import torch; print(torch._C._get_sm_carveout_experimental())"
    assert main(["run", "--strategy", "sm-carveout+priority", "--", sys.executable, "-c", program]) == 0
    assert capfd.readouterr().out.strip() == str(levers.comm_sms(24, sms))  # 24 on an H200 (132 SMs)


# --- ccoverlap run --config: a tuned policy file ----------------------------------------------------

def config(tmp_path, combo: str, **knobs) -> str:
    from ccoverlap.control.policy import TunedPolicy

    return str(TunedPolicy.of(combo, knobs).save(tmp_path / "tuned.json", speedup=1.1))


def test_a_policy_file_reaches_the_program_as_the_tuner_ran_it(on_h200, capfd, tmp_path, monkeypatch):
    monkeypatch.setenv("CCOVERLAP_KEEP", "30")  # the caller's interposer variables do not change a tuned policy
    env = child_env(capfd, "--config", config(tmp_path, "priority+shape+sm-carveout=16", NCCL_ALGO="Ring"))
    assert (env["TORCH_NCCL_HIGH_PRIORITY"], env["NCCL_ALGO"], env["CCOVERLAP_MODE"]) == ("1", "Ring", "auto")
    assert env["CCOVERLAP_KEEP"] == "" and parse(env)["keep"] == 50  # unset in a whole policy: written empty
    assert env["LD_PRELOAD"].split()[0] == library_path()
    assert json.loads(env[startup.STARTUP_ENV]) == {"sm_carveout": "16"}
    assert env["PYTHONPATH"].split(os.pathsep)[0] == startup.HOOK_DIR
    env = child_env(capfd, "--config", config(tmp_path, "shape"), "--keep", "30", "--mode", "auto")  # options on top
    assert (env["CCOVERLAP_KEEP"], env["CCOVERLAP_MODE"]) == ("30", "auto")
    assert child_env(capfd, "--strategy", "shape")["CCOVERLAP_KEEP"] == "30"  # --strategy layers over the variables


def test_a_policy_files_start_up_calls_are_made_as_the_program_imports_torch(on_h200, capfd, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", fake_torch_and_user_site(tmp_path))
    assert main(["run", "--config", config(tmp_path, "sm-carveout+nccl-ctas=4"), "--", sys.executable, "-c",
                 PROGRAM]) == 0
    seen = json.loads(capfd.readouterr().out)
    assert seen["before"] == [] and seen["after"] == [8]  # auto under the file's NCCL_MAX_CTAS=4


@pytest.mark.parametrize(("argv", "message"), [
    (["--strategy", "priority"], "--config and --strategy: give one"),
    (["--mode", "pad", "--pad-bytes", "64"], "--mode pad disagrees with --config {path}, which sets mode auto"),
])
def test_a_policy_file_with_what_disagrees_is_one_line_exit_2(argv, message, on_h200, capsys, tmp_path):
    path = config(tmp_path, "priority+shape")
    assert main(["run", "--config", path, *argv, "--", "true"]) == 2
    err = capsys.readouterr().err
    assert message.format(path=path) in err and err.count("\n") == 1


def test_a_bad_policy_file_is_one_line_exit_2_and_no_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "ccoverlap-policy/1", "levers": {"warp-drive": "on"}}))
    assert refused(capsys, "--config", str(bad)) == [
        f"ccoverlap run: error: {bad}: unknown lever 'warp-drive': valid {', '.join(levers.BY_NAME)}"]


def test_a_policy_file_whose_levers_do_not_apply_here_is_refused(tmp_path, capsys):
    path = config(tmp_path, "nccl-ctas=8+priority")
    assert refused(capsys, "--config", path) == [  # this CPU machine
        f"ccoverlap run: error: --config {path}: nccl-ctas: needs CUDA"]


def test_a_policy_file_cannot_smuggle_code_into_the_program(tmp_path):
    """The report's attack: a sitecustomize on PYTHONPATH, a BASH_ENV script and LD_PRELOAD, as knobs. Each is
    refused in one line naming it and --allow-env, and the program never starts (nothing of it ran)."""
    ran = tmp_path / "ran"
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(f"open({str(ran)!r}, 'a').write('python ')\n")
    (tmp_path / "env.sh").write_text(f"echo bash >> {ran}\n")
    program = ["bash", "-c", f"echo program >> {ran}"]
    for name, value in (("PYTHONPATH", str(tmp_path / "site")), ("BASH_ENV", str(tmp_path / "env.sh")),
                        ("LD_PRELOAD", library_path())):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"format": "ccoverlap-policy/1", "knobs": {"NCCL_ALGO": "Ring", name: value}}))
        out = run_cli("run", "--config", str(path), "--", *program)
        assert out.returncode == 2 and out.stderr.splitlines() == [
            f"ccoverlap run: error: {path}: knob {name} is not a tuning variable a policy may set (it "
            "could run code or name a file; the tuning variables: docs/tune.md); to trust this policy with it, give "
            f"--allow-env {name}"], out.stderr
        assert not ran.exists()


@pytest.mark.parametrize("name", ["LD_PRELOAD", "PYTHONPATH", "BASH_ENV", "NCCL_NET_PLUGIN"])
def test_no_refused_knob_reaches_the_child_and_an_allowed_one_does(name, on_h200, capfd, tmp_path):
    path = str(TunedPolicy.of("priority", {"NCCL_ALGO": "Tree", name: "/nowhere"}).save(tmp_path / "p.json"))
    assert main(["run", "--config", path, "--", sys.executable, "-c", PRINT_ENV]) == 2
    out, err = capfd.readouterr()
    assert out == "" and err.count("\n") == 1 and f"--allow-env {name}" in err  # the child never started
    env = child_env(capfd, "--config", path, "--allow-env", "OTHER", "--allow-env", name)
    assert "/nowhere" in env[name] and env["NCCL_ALGO"] == "Tree"  # LD_PRELOAD: after the interposer


def test_tuning_knobs_reach_the_child_and_allow_env_needs_config(on_h200, capfd, tmp_path):
    knobs = {"NCCL_ALGO": "Ring", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "8",
             "OMP_NUM_THREADS": "3"}
    env = child_env(capfd, "--config", str(TunedPolicy.of("priority", knobs).save(tmp_path / "p.json")))
    assert {k: env[k] for k in knobs} == knobs and env["TORCH_NCCL_HIGH_PRIORITY"] == "1"
    assert main(["run", "--allow-env", "LD_PRELOAD", "--", "true"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "--allow-env: only with --config" in err
