"""Tuned policies (ccoverlap/control/policy.py): the file (levers + knobs, the rest derived and checked), its one-line
errors, and `ccoverlap.enable` inside a running script. `ccoverlap run --config` is in test_run_strategy.py."""
import json
import os
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from test_run_strategy import H200

from ccoverlap.gpu import cuda_driver
from ccoverlap.control import levers, policy as tuned
from ccoverlap.util.errors import UsageError
from ccoverlap.control.interposer import library_path
from ccoverlap.control.policy import FORMAT, TunedPolicy

GOOD = {"format": FORMAT, "levers": {"priority": "on", "nccl-ctas": "8"}, "knobs": {"NCCL_ALGO": "Ring"}}


def test_a_policy_is_levers_and_knobs_and_the_rest_is_derived():
    p = TunedPolicy.of("priority+shape+nccl-ctas=08", {"NCCL_ALGO": "Ring,Tree"})
    assert p.levers == (("priority", "on"), ("shape", "auto"), ("nccl-ctas", "8"))  # values as the registry writes them
    assert p.name == "priority+shape+nccl-ctas=8+NCCL_ALGO=Ring,Tree"
    assert p.env == {"TORCH_NCCL_HIGH_PRIORITY": "1", "NCCL_MAX_CTAS": "8", "NCCL_ALGO": "Ring,Tree"}
    assert (p.policy, p.startup) == ({"mode": "auto"}, {})
    assert p.strategy == levers.strategy("priority+shape+nccl-ctas=8")
    assert TunedPolicy.of("default").name == "default" and TunedPolicy.of("default", {"A": "1"}).name == "A=1"
    assert p == TunedPolicy(p.levers, p.knobs, meta={"speedup": 2})  # notes are not the policy
    assert p.not_applicable(levers.Host("cpu")) == "priority: needs CUDA or ROCm" and p.not_applicable(H200) is None


@pytest.mark.parametrize(("strategy", "knobs", "message"), [
    ("no-overlap", {}, "no-overlap is the bench's baseline"),
    ("nccl-ctas=8", {"NCCL_MAX_CTAS": "16"},
     "knob NCCL_MAX_CTAS=16 conflicts with lever nccl-ctas, which sets NCCL_MAX_CTAS=8"),
    ("default", {"9LIVES": "1"}, "knob '9LIVES': not an environment variable name"),
    ("default", {"A": "x\ny"}, "knob A='x\\ny': the value must be a string without NUL or newline"),
])
def test_what_is_not_a_policy_is_refused(strategy, knobs, message):
    with pytest.raises(UsageError, match=None) as err:
        TunedPolicy.of(strategy, knobs)
    assert message in str(err.value)


def test_a_knob_that_agrees_with_a_lever_is_fine():
    assert TunedPolicy.of("nccl-ctas=8", {"NCCL_MAX_CTAS": "8"}).env == {"NCCL_MAX_CTAS": "8"}


def test_save_then_load_gives_the_same_policy_and_its_notes(tmp_path):
    p = TunedPolicy.of("priority+shape+sm-carveout=16", {"NCCL_ALGO": "Ring"})
    path = p.save(tmp_path / "sub" / "tuned.json", speedup=1.25, command=["python", "train.py"])
    assert [f.name for f in path.parent.iterdir()] == ["tuned.json"]  # atomic: no temporary file left
    d = json.loads(path.read_text())
    assert d == {"format": FORMAT, "name": p.name, "levers": {"priority": "on", "shape": "auto", "sm-carveout": "16"},
                 "knobs": {"NCCL_ALGO": "Ring"}, "comm_regex": None,
                 "env": {"TORCH_NCCL_HIGH_PRIORITY": "1", "NCCL_ALGO": "Ring"},
                 "policy": {"mode": "auto"}, "startup": {"sm_carveout": "16"}, "speedup": 1.25,
                 "command": ["python", "train.py"]}
    back = tuned.load(path)
    assert back == p and back.levers == p.levers and back.knobs == p.knobs
    assert back.meta == {"speedup": 1.25, "command": ["python", "train.py"]}
    assert TunedPolicy.from_dict({k: d[k] for k in ("format", "levers", "knobs")}, "x") == p  # derived keys optional
    with pytest.raises(ValueError, match="metadata may not use the policy's own keys: env"):
        p.to_dict(env={})


#: (file content, the problem the one line names)
BAD = {
    "missing": (None, "cannot read the policy (No such file or directory)"),
    "not JSON": ("{", "not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    "not an object": ("[]", "a policy is a JSON object, not list"),
    "no format": ({"levers": {}}, f"no format key ('{FORMAT}')"),
    "wrong format": (GOOD | {"format": "ccoverlap-policy/9"}, f"format 'ccoverlap-policy/9' is not '{FORMAT}'"),
    "unknown lever": (GOOD | {"levers": {"warp-drive": "on"}}, "unknown lever 'warp-drive': valid priority, shape"),
    "bad lever value": (GOOD | {"levers": {"nccl-threads": "100"}}, "nccl-threads=100: valid 64..512 in steps of 32"),
    "lever value not a string": (GOOD | {"levers": {"nccl-ctas": 8}},
                                 "levers must be an object of names to string values"),
    "levers not an object": (GOOD | {"levers": ["priority"]}, "levers must be an object of names to string values"),
    "lever twice": ('{"format": "%s", "levers": {"priority": "on", "priority": "on"}}' % FORMAT,
                    "key 'priority' given twice"),
    "bad knob name": (GOOD | {"knobs": {"NCCL-ALGO": "Ring"}}, "knob 'NCCL-ALGO': not an environment variable name"),
    "knob conflicts with a lever": (GOOD | {"knobs": {"NCCL_MAX_CTAS": "16"}},
                                    "knob NCCL_MAX_CTAS=16 conflicts with lever nccl-ctas, which sets NCCL_MAX_CTAS=8"),
    "env edited": (GOOD | {"env": {"TORCH_NCCL_HIGH_PRIORITY": "1", "NCCL_MAX_CTAS": "16", "NCCL_ALGO": "Ring"}},
                   "edited inconsistently: its env is not what its levers and knobs set"),
    "policy edited": (GOOD | {"policy": {"mode": "pad"}}, "edited inconsistently: its policy is not"),
    "name edited": (GOOD | {"name": "fast"}, "edited inconsistently: its name is not"),
}


def write(tmp_path, content) -> str:
    path = tmp_path / "policy.json"
    if content is not None:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


@pytest.mark.parametrize(("content", "message"), BAD.values(), ids=BAD.keys())
def test_every_bad_file_is_one_line_naming_the_file_and_the_problem(content, message, tmp_path):
    path = write(tmp_path, content)
    with pytest.raises(UsageError) as err:
        tuned.load(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value) and "\n" not in str(err.value)


# --- ccoverlap.enable ------------------------------------------------------------------------------

@pytest.fixture
def script(monkeypatch):
    """A script's process on an H200 (as the levers see it), its environment restored afterwards, the start-up
    calls recorded instead of made, and a driver that reports 132 SMs (for `auto`)."""
    before = dict(os.environ)
    monkeypatch.setattr(levers.Host, "detect", lambda: H200)
    calls = []
    monkeypatch.setattr(levers, "STARTUP_CALLS", {"sm_carveout": calls.append})

    class Driver:
        def device(self, i):
            return i

        def device_attribute(self, attr, device):
            return 132

    monkeypatch.setattr(cuda_driver, "driver", lambda: Driver())
    for var in ("TORCH_NCCL_HIGH_PRIORITY", "NCCL_MAX_CTAS", "NCCL_ALGO", "LD_PRELOAD"):
        os.environ.pop(var, None)
    yield calls
    os.environ.clear()
    os.environ.update(before)


def enabled(policy, allow_env=()) -> tuple[TunedPolicy, list[str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        p = tuned.enable(policy, allow_env)
    return p, [str(w.message) for w in seen if w.category is UserWarning]


def test_enable_sets_the_variables_then_makes_the_start_up_calls(script, tmp_path):
    path = TunedPolicy.of("priority+nccl-ctas=4+sm-carveout", {"NCCL_ALGO": "Ring"}).save(tmp_path / "t.json")
    p, warned = enabled(str(path))
    assert p == tuned.load(path) and warned == []  # no interposer field: nothing it cannot apply
    assert ((os.environ["TORCH_NCCL_HIGH_PRIORITY"], os.environ["NCCL_MAX_CTAS"], os.environ["NCCL_ALGO"])
            == ("1", "4", "Ring"))
    assert script == [8]  # auto: the SMs NCCL's CTAs need under NCCL_MAX_CTAS=4, set before the call


def test_enable_takes_a_policy_or_a_dict(script):
    assert enabled(TunedPolicy.of("sm-carveout=16"))[1] == [] and script == [16]
    assert enabled(GOOD)[0] == tuned.TunedPolicy.from_dict(GOOD, "x") and os.environ["NCCL_MAX_CTAS"] == "8"
    with pytest.raises(UsageError, match="ccoverlap.enable: unknown lever 'warp'"):
        tuned.enable(GOOD | {"levers": {"warp": "on"}})


def test_enable_warns_once_with_the_command_to_run_where_the_interposer_is_not_loaded(script, tmp_path):
    path = TunedPolicy.of("priority+shape+carveout-hint").save(tmp_path / "t.json")
    assert not tuned.interposer_loaded()  # pytest runs without the interposer preloaded
    _, warned = enabled(path)
    command = f"ccoverlap run --config {os.path.abspath(path)} -- {shlex.join([sys.executable, *sys.argv])}"
    assert len(warned) == 1 and warned[0].endswith(command)
    assert "interposer fields mode auto, carveout 100 not applied" in warned[0]
    assert os.environ["TORCH_NCCL_HIGH_PRIORITY"] == "1"  # what can be applied still is
    _, warned = enabled(TunedPolicy.of("shape"))  # no file: save it first
    assert len(warned) == 1 and "save it first: ccoverlap.enable(...).save('POLICY.json')" in warned[0]
    assert "ccoverlap run --config POLICY.json -- " in warned[0]


def test_the_interposer_is_loaded_when_its_library_is_mapped(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(f"7f00-7f01 r-xp 00000000 08:01 42   {os.path.realpath(library_path())}\n")
    assert tuned.interposer_loaded(str(maps))
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 42   /usr/lib/libc.so.6\n")
    assert not tuned.interposer_loaded(str(maps))


def test_a_policy_that_does_not_apply_here_is_a_warning_and_nothing_is_set(script, monkeypatch):
    monkeypatch.setattr(levers.Host, "detect", lambda: levers.Host("cpu"))
    _, warned = enabled(TunedPolicy.of("priority+sm-carveout=16"))
    assert warned == ["ccoverlap.enable: policy priority+sm-carveout=16 does not apply here (priority: needs CUDA or "
                      "ROCm): nothing applied"]
    assert "TORCH_NCCL_HIGH_PRIORITY" not in os.environ and script == []


def test_a_start_up_call_that_fails_is_a_warning(script, monkeypatch):
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    _, warned = enabled(TunedPolicy.of("sm-carveout"))
    assert warned == ['ccoverlap.enable: start-up calls {"sm_carveout": "auto"} not made: RuntimeError: '
                      "no CUDA driver: `auto` needs a GPU's SM count"]


def test_enable_after_init_process_group_warns_that_only_later_communicators_get_it(script):
    dist = pytest.importorskip("torch.distributed")
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        _, warned = enabled(TunedPolicy.of("priority"))
    finally:
        dist.destroy_process_group()
    assert len(warned) == 1 and "torch.distributed is already initialised" in warned[0]
    assert "reach only the NCCL communicators created from now on" in warned[0]
    assert os.environ["TORCH_NCCL_HIGH_PRIORITY"] == "1"


def test_import_ccoverlap_and_its_enable_do_not_import_torch():
    program = "import sys, ccoverlap; ccoverlap.enable; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


# --- a policy is data: knobs only from the tuning variables, unless the user allows a name ------------------

SMUGGLERS = ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "BASH_ENV",
             "ENV", "PATH", "CUDA_INJECTION64_PATH", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_DEBUG_FILE",
             "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "NODE_OPTIONS", "PERL5OPT"]
TUNING = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "TORCH_NCCL_BLOCKING_WAIT": "1",
          "CUDA_DEVICE_MAX_CONNECTIONS": "8", "OMP_NUM_THREADS": "4"}


@pytest.mark.parametrize("name", SMUGGLERS)
def test_a_knob_that_is_no_tuning_variable_is_refused_in_one_line_with_how_to_allow_it(name, tmp_path):
    content = {"format": FORMAT, "knobs": {"NCCL_ALGO": "Ring", name: "/tmp/x"}}
    path = write(tmp_path, content)
    with pytest.raises(UsageError) as err:
        tuned.load(path)
    assert str(err.value) == (f"{path}: knob {name} is not a tuning variable a policy may set (it could run code or "
                              "name a file; the tuning variables: docs/tune.md); to trust this policy with it, give "
                              f"--allow-env {name}")
    with pytest.raises(UsageError, match=rf"^ccoverlap.enable: knob {name} is .*allow_env=\['{name}'\]\)$"):
        tuned.enable(content)
    assert tuned.load(path, allow_env=[name]).env[name] == "/tmp/x"  # allowed by name: the user's own choice
    with pytest.raises(UsageError, match=f"knob {name} is not"):
        tuned.load(path, allow_env=["SOMETHING_ELSE"])


def test_tuning_variables_load_and_a_policy_tuned_with_any_knob_saves_and_loads_when_allowed(tmp_path):
    p = tuned.load(write(tmp_path, {"format": FORMAT, "knobs": TUNING}))
    assert p.env == TUNING
    mine = TunedPolicy.of("priority", {"MY_APP_SETTING": "2"})  # what `tune --env MY_APP_SETTING=1,2` makes
    path = mine.save(tmp_path / "mine.json")
    with pytest.raises(UsageError, match="--allow-env MY_APP_SETTING$"):
        tuned.load(path)
    assert tuned.load(path, allow_env=("MY_APP_SETTING",)) == mine


def test_every_levers_variable_is_a_tuning_variable_and_docs_list_the_table():
    for lever in levers.LEVERS:
        assert all(map(tuned.is_tuning_variable, lever.setting(lever.value(None)).env)), lever.name
    docs = (Path(__file__).parents[1] / "docs" / "tune.md").read_text()
    assert all(f"`{pattern}`" in docs for pattern in tuned.TUNING_VARIABLES)
    assert not tuned.is_tuning_variable("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")  # a prefix never covers a file


def test_enable_refuses_a_smuggled_variable_and_sets_nothing(script, tmp_path):
    content = {"format": FORMAT, "levers": {"priority": "on"}, "knobs": {"NCCL_ALGO": "Ring", "LD_PRELOAD": "/x.so"}}
    with pytest.raises(UsageError):
        tuned.enable(write(tmp_path, content))
    assert not {"TORCH_NCCL_HIGH_PRIORITY", "NCCL_ALGO", "LD_PRELOAD"} & set(os.environ)
    enabled_policy, _ = enabled(content, ["LD_PRELOAD"])
    assert os.environ["LD_PRELOAD"] == "/x.so" and enabled_policy.knobs[-1] == ("LD_PRELOAD", "/x.so")



@pytest.mark.parametrize("make", ["fifo", "directory"])
def test_a_policy_that_is_no_regular_file_is_one_line_and_never_opened(make, tmp_path):
    """A FIFO nobody writes would block the read until the command is killed; it is refused from its stat."""
    target = tmp_path / "p.json"
    os.mkfifo(target) if make == "fifo" else target.mkdir()
    with pytest.raises(UsageError,
                       match=f"^{target}: a {'FIFO' if make == 'fifo' else 'directory'}, not a policy file$"):
        tuned.load(target)
