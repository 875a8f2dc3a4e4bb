"""The interposer's policy table and parser (csrc/policy.c) as Python sees them, LD_PRELOAD
handling, and `ccoverlap run` ending as its command ended. CPU only."""
import json
import os
import signal
import subprocess
import sys

import pytest
from test_interposer import clean_env, run_cli

from ccoverlap.model import _native
from ccoverlap.cli import build_parser
from ccoverlap.control.config import option_help
from ccoverlap.util.errors import UsageError
from ccoverlap.control.interposer import FIELDS, POLICY_ENV, Policy, library_path, parse, preload_env
from ccoverlap.control.launch import Launch
from ccoverlap.control.policy import for_run

#: a real shared object that does nothing when preloaded: the C core Python loads
HARMLESS_SO = _native.library_path()


def sample(field):
    """A valid value of `field`, as the normalized JSON holds it."""
    if field.kind == "enum":
        return field.choices[-1]
    return {"int": field.hi, "int_auto": field.lo, "regex": "^x|y$", "path": "/tmp/ccov-é-%p.json"}[field.kind]


def bad_values(field):
    """(text, the library's message) for values of `field` it refuses."""
    env, lo, hi = field.env, field.lo, field.hi
    return {
        "enum": [("nope", f"{env}=nope is not a {field.key}: valid {', '.join(field.choices)}")],
        "int": [("12k", f"{env}=12k is not a whole number"),
                (str(hi + 1), f"{env}={hi + 1} is out of range: valid {lo}..{hi}"),
                (str(lo - 1), f"{env}={lo - 1} is out of range: valid {lo}..{hi}"),
                ("99999999999999999999", f"{env}=99999999999999999999 is out of range: valid {lo}..{hi}")],
        "int_auto": [("some", f"{env}=some is not auto or a whole number: valid auto or {lo}..{hi}"),
                     (str(hi + 1), f"{env}={hi + 1} is out of range: valid auto or {lo}..{hi}")],
        "regex": [("a(", f"{env}=a( is not a valid POSIX extended regex: ")],
        "path": [],
    }[field.kind]


BAD = [(f, text, message) for f in FIELDS for text, message in bad_values(f)]


@pytest.mark.parametrize(("field", "text", "message"), BAD, ids=[f"{f.key}={t}" for f, t, _ in BAD])
def test_the_parser_refuses_bad_values_of_every_field(field, text, message):
    with pytest.raises(UsageError) as exc:
        parse({field.env: text})
    assert str(exc.value).startswith(message)
    assert field.kind == "regex" or str(exc.value) == message


def test_defaults_are_the_libraries():
    assert list(parse({})) == [f.key for f in FIELDS]
    assert Policy() == Policy.from_environ({}) == Policy.from_environ({f.env: "" for f in FIELDS})  # empty: unset
    assert vars(Policy()) == parse({}) and Policy().mode == "off" and Policy().keep == 50
    assert {f.key for f in FIELDS if f.default} == {"comm_per_sm", "drain", "keep"}


def test_every_field_through_a_policy_file_and_back(tmp_path):
    values = {f.key: sample(f) for f in FIELDS}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(values, ensure_ascii=False))
    normalized = parse({POLICY_ENV: str(path)})
    assert normalized == values
    path.write_text(json.dumps(normalized, ensure_ascii=False))  # the normalized JSON is itself a policy file
    assert parse({POLICY_ENV: str(path)}) == normalized
    p = Policy.from_environ({POLICY_ENV: str(path)})
    env = Launch(fields={k: str(v) for k, v in values.items()}).environ({})  # every field as variables, and back
    assert vars(p) == values and Policy.from_environ(env) == p
    assert env["CCOVERLAP_STATS"] == "/tmp/ccov-é-%p.json"  # UTF-8 survives C and back


def test_policy_file_rules(tmp_path):
    path = tmp_path / "p.json"
    env = {POLICY_ENV: str(path)}

    def refused(text: str) -> str:
        path.write_text(text)
        with pytest.raises(UsageError) as exc:
            parse(env)
        return str(exc.value)

    path.write_text('{"mode": "auto", "pad_bytes": null, "keep": 10, "drain": "auto", "exclude": "a\\\\|b\\/c"}')
    assert parse(env) == parse({"CCOVERLAP_MODE": "auto", "CCOVERLAP_KEEP": "10", "CCOVERLAP_EXCLUDE": "a\\|b/c"})
    assert parse(env | {"CCOVERLAP_KEEP": "20"})["keep"] == 20  # a variable overrides the file
    path.write_text('{"keep": 10, "exclude": "x", "keep": null, "exclude": null}')  # null: as if absent
    assert parse(env) == parse({})
    assert refused('{"pad": 1}') == f'{POLICY_ENV}={path}: unknown key "pad": valid {", ".join(f.key for f in FIELDS)}'
    assert refused('{"comm": "\\u0041"}') == f"{POLICY_ENV}={path}: \\u escapes are not supported"
    assert refused('{"mode": "off"} x').startswith(f"{POLICY_ENV}={path}: malformed JSON: trailing text")
    assert refused(" " * 65536 + "{}") == f"{POLICY_ENV}={path}: larger than 64 KiB"
    for field in FIELDS:
        wrong = {"int": '"1"', "int_auto": "1.5"}.get(field.kind, "1")
        want = {"int": "a whole number", "int_auto": 'a whole number or "auto"'}.get(field.kind, "a string")
        assert refused(f'{{"{field.key}": {wrong}}}') == f'{POLICY_ENV}={path}: "{field.key}" must be {want}'


def test_an_answer_longer_than_the_first_buffer_comes_back_whole():
    long = "/" + "a" * 100_000
    assert parse({"CCOVERLAP_STATS": long})["stats"] == long


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.key)
def test_every_field_is_a_ccoverlap_run_option(field, tmp_path):
    value = sample(field)
    args = build_parser().parse_args(["run", field.option, str(value), "--", "true"])
    env = for_run(None, None, {f.key: v for f in FIELDS if (v := getattr(args, f.key)) is not None}).environ({})
    assert env[field.env] == (os.path.abspath(value) if field.kind == "path" else str(value))
    assert getattr(Policy.from_environ(env), field.key) == value
    help_line = option_help(field)
    assert field.env in help_line and field.valid in help_line and (field.default or "") in help_line


def test_ccoverlap_run_help_lists_every_field(capsys):
    from ccoverlap.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(f.option in out and f.env in out for f in FIELDS)
    assert "%p becomes the pid" in out and "N% of a kernel's" in out  # argparse's % escaped once


def test_preload_env_puts_the_interposer_first_once_and_keeps_the_rest():
    lib = library_path()
    assert preload_env({}) == {"LD_PRELOAD": lib}
    assert preload_env({"LD_PRELOAD": f"{HARMLESS_SO}:{lib}  /x.so"}) == {"LD_PRELOAD": f"{lib} {HARMLESS_SO} /x.so"}
    once = preload_env({"LD_PRELOAD": HARMLESS_SO})
    assert preload_env(once) == once


def test_ccoverlap_run_keeps_the_users_preload():
    env = clean_env(LD_PRELOAD=HARMLESS_SO)
    out = run_cli("run", "--pad-bytes", "64", "--", "sh", "-c", 'echo "$LD_PRELOAD"', env=env)
    assert out.returncode == 0 and out.stdout.split() == [library_path(), HARMLESS_SO]
    maps = "import sys; sys.stdout.write(open('/proc/self/maps').read())"
    out = run_cli("run", "--", sys.executable, "-c", maps, env=env)
    assert out.returncode == 0 and out.stderr == ""
    assert os.path.realpath(HARMLESS_SO) in out.stdout and os.path.realpath(library_path()) in out.stdout  # both loaded


def test_every_bench_strategy_keeps_the_users_preload(monkeypatch):
    pytest.importorskip("torch")
    from ccoverlap.bench import launcher
    from ccoverlap.control.levers import STRATEGIES

    monkeypatch.setenv("LD_PRELOAD", HARMLESS_SO)
    for strategy in STRATEGIES:
        env = launcher.rank_launch(strategy, "/tmp/s").environ(os.environ)  # as run_ranks starts a rank
        want = [library_path(), HARMLESS_SO] if strategy.setting().policy else [HARMLESS_SO]
        assert env["LD_PRELOAD"].split() == want, strategy.name


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=lambda s: s.name)
def test_run_dies_of_the_signal_its_command_died_of(sig):
    out = run_cli("run", "--", "sh", "-c", f"kill -{sig.name[3:]} $$")
    assert out.returncode == -sig and out.stderr == ""  # no traceback: the OOM killer's SIGKILL included
    shell = subprocess.run(["sh", "-c", f'"$0" -m ccoverlap run -- sh -c "kill -{sig.name[3:]} \\$\\$"; echo $?',
                            sys.executable], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert shell.stdout.split()[-1] == str(128 + sig)
