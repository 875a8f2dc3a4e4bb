"""The lever registry: parsing, applicability, settings, names, and `ccoverlap levers`."""
import dataclasses
import importlib
import importlib.util
import json
import subprocess
import sys

import pytest

from ccoverlap.control import levers
from ccoverlap.util.errors import UsageError

H200 = levers.Host("cuda", (2, 28, 9), (9, 0), sm_carveout=True, green_contexts=True, interposer=True)
A100_OLD_NCCL = levers.Host("cuda", (2, 21, 5), (8, 0), sm_carveout=True, green_contexts=False, interposer=True)
CPU = levers.Host("cpu", interposer=True)
ROCM = levers.Host("rocm", None, (9, 0), interposer=True)


def test_issue_levers_are_registered():
    assert {"priority", "shape", "carveout-hint", "sm-carveout", "green", "nccl-cluster", "nccl-cta-policy",
            "nccl-ctas", "nccl-threads", "max-connections"} <= set(levers.BY_NAME)


@pytest.mark.parametrize("text, env, policy, startup", [
    ("priority", {"TORCH_NCCL_HIGH_PRIORITY": "1"}, {}, {}),
    ("nccl-cluster=1", {"NCCL_CGA_CLUSTER_SIZE": "1"}, {}, {}),
    ("nccl-cta-policy=zero", {"NCCL_CTA_POLICY": "2"}, {}, {}),
    ("nccl-cta-policy", {"NCCL_CTA_POLICY": "1"}, {}, {}),
    ("nccl-ctas+nccl-threads", {"NCCL_MAX_CTAS": "4", "NCCL_NTHREADS": "256"}, {}, {}),
    ("max-connections", {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, {}, {}),
    ("priority+shape", {"TORCH_NCCL_HIGH_PRIORITY": "1"}, {"mode": "auto"}, {}),
    ("carveout-hint=60", {}, {"carveout": "60"}, {}),
    ("comm-carveout-hint", {}, {"comm_carveout": "100"}, {}),
    ("carveout-hint=60+comm-carveout-hint=80", {}, {"carveout": "60", "comm_carveout": "80"}, {}),
    ("sm-carveout=24+priority", {"TORCH_NCCL_HIGH_PRIORITY": "1"}, {}, {"sm_carveout": "24"}),
])
def test_settings(text, env, policy, startup):
    s = levers.strategy(text).setting()
    assert (dict(s.env), dict(s.policy), dict(s.startup)) == (env, policy, startup)


def test_names_are_derived_and_round_trip():
    for s in levers.STRATEGIES:
        assert levers.strategy(s.name) == s
    assert levers.strategy("nccl-ctas=4+nccl-threads=256").name == "nccl-ctas+nccl-threads"
    assert levers.strategy("nccl-cluster=2").name == "nccl-cluster=2"
    assert len({s.name for s in levers.STRATEGIES}) == len(levers.STRATEGIES)


@pytest.mark.parametrize("text, message", [
    ("warp-drive", "unknown lever 'warp-drive': valid priority, shape"),
    ("nccl-threads=100", "nccl-threads=100: valid 64..512 in steps of 32"),
    ("nccl-threads=1024", "nccl-threads=1024: valid 64..512 in steps of 32"),
    ("nccl-cluster=9", "nccl-cluster=9: valid 0..8"),
    ("nccl-cluster=-1", "nccl-cluster=-1: valid 0..8"),
    ("carveout-hint=abc", "carveout-hint=abc: valid 0..100"),
    ("comm-carveout-hint=101", "comm-carveout-hint=101: valid 0..100"),
    ("nccl-cta-policy=FAST", "nccl-cta-policy=FAST: valid EFFICIENCY, ZERO"),
    ("priority+priority", "lever priority named twice"),
    ("sm-carveout=x", "sm-carveout=x: valid 1..128 or auto"),
])
def test_bad_input_is_one_usage_error(text, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("+", r"\+")):
        levers.strategy(text)


def test_conflicting_levers_are_refused():
    a, b = levers.Setting(env={"X": "1"}), levers.Setting(env={"X": "2"})
    with pytest.raises(UsageError, match="env X is set to both 1 and 2"):
        a.merged(b, "test")
    assert a.merged(levers.Setting(env={"X": "1", "Y": "3"}), "test").env == {"X": "1", "Y": "3"}


def test_applicability_names_the_reason():
    lv = levers.BY_NAME
    assert lv["nccl-cluster"].applies(H200) is None
    assert lv["nccl-cta-policy"].applies(H200) is None
    assert lv["nccl-cta-policy"].applies(A100_OLD_NCCL) == "needs NCCL >= 2.27.3; this is 2.21.5"
    assert lv["nccl-cluster"].applies(A100_OLD_NCCL) == "thread-block clusters need compute capability 9.0 or newer"
    assert lv["priority"].applies(CPU) == "needs CUDA or ROCm"
    assert lv["carveout-hint"].applies(ROCM) == "needs CUDA"
    assert lv["priority"].applies(ROCM) is None
    assert lv["max-connections"].applies(H200, "lab").startswith("needs a fresh process")
    assert lv["green"].applies(H200, "process").startswith("needs the compute on a green-context stream")
    assert lv["green"].applies(H200, "lab") is None
    no_interposer = levers.Host("cuda", (2, 28, 9), (9, 0), interposer=False)
    assert lv["shape"].applies(no_interposer) == "the launch interposer is not built (pip install -e .)"
    assert levers.strategy("priority+nccl-cluster").not_applicable(A100_OLD_NCCL) == (
        "nccl-cluster: thread-block clusters need compute capability 9.0 or newer")
    assert levers.strategy("default").not_applicable(CPU) is None


def test_startup_auto_takes_the_tools_size(monkeypatch):
    calls = []
    monkeypatch.setattr(levers, "STARTUP_CALLS", {"sm_carveout": calls.append})
    levers.run_startup({"sm_carveout": "auto"}, auto_sms=16)
    levers.run_startup({"sm_carveout": "8"}, auto_sms=16)
    assert calls == [16, 8]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "ccoverlap", "levers", *args], capture_output=True, text=True)


def test_cli_json_lists_every_lever_with_applicability():
    out = _cli("--json", "-")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [r["name"] for r in data["levers"]] == list(levers.BY_NAME)
    for row in data["levers"]:
        assert set(row["applies"]) == {"process", "lab"}
        assert all(v == "yes" or v for v in row["applies"].values())


def test_comm_carveout_hint_is_the_mirror_of_carveout_hint():
    """comm-carveout-hint: the communication kernels' carveout (policy comm_carveout), marked by the interposer's
    count of communication kernels it hinted; listed by `ccoverlap levers`, not among the default strategies."""
    from ccoverlap.control.interposer import LaunchStats
    lv = levers.BY_NAME["comm-carveout-hint"]
    assert (lv.domain.describe(), lv.default) == ("0..100", "100")
    assert lv.setting(lv.value(None)) == levers.Setting(policy={"comm_carveout": "100"})
    assert lv.applies(H200) is None and lv.applies(H200, "lab") is None and lv.applies(ROCM) == "needs CUDA"
    assert lv.applies(levers.Host("cuda", (2, 28, 9), (9, 0), interposer=False)) == (
        "the launch interposer is not built (pip install -e .)")
    stats = LaunchStats(files=1, launches=4, comm_launches=2, comm_priorities=frozenset({0}),
                        comm_clusters=frozenset({1}), comm_grid=(16, 16), comm_threads=(256, 256), padded=0,
                        carveout_set=0, comm_carveout_set=1, cooperative=frozenset(), sm_limits={}, serialized=0)
    assert levers.took_effect([("comm-carveout-hint", "100")], stats) == {"comm-carveout-hint": True}
    assert levers.took_effect([("carveout-hint", "100")], stats) == {"carveout-hint": False}  # the other side's
    unhinted = dataclasses.replace(stats, comm_carveout_set=0, carveout_set=3)
    assert levers.took_effect([("comm-carveout-hint", "100")], unhinted) == {"comm-carveout-hint": False}
    assert "comm-carveout-hint" not in {name for s in levers.STRATEGIES for name, _ in s.levers}
    out = _cli("--json", "-")
    assert out.returncode == 0, out.stderr
    row, = (r for r in json.loads(out.stdout)["levers"] if r["name"] == "comm-carveout-hint")
    assert (row["values"], row["default"], row["mark"]) == (
        "0..100", "100", "the carveout hint set on communication kernels")
    assert row["summary"].startswith("communication kernels ask for the largest shared-memory carveout")


def test_cli_strategy_and_bad_input():
    out = _cli("--strategy", "priority+nccl-cluster=1", "--json", "-")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["env"] == {"TORCH_NCCL_HIGH_PRIORITY": "1", "NCCL_CGA_CLUSTER_SIZE": "1"}
    bad = _cli("--strategy", "nccl-threads=100")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "ccoverlap levers: error: nccl-threads=100: valid 64..512 in steps of 32"]


#: every table of a lever's mechanisms, and the module that makes it
TABLES = {"what-if transform": "ccoverlap.whatif.transforms", "lab set-up": "ccoverlap.lab.runner",
          "remedy": "ccoverlap.analysis.recommend"}


def test_a_new_lever_must_fill_every_table_of_its_mechanisms(monkeypatch):
    pytest.importorskip("torch")  # the lab's table lives beside its torch code
    for module in TABLES.values():
        importlib.import_module(module)
    assert set(levers.MECHANISMS) == set(TABLES)
    assert all(levers.unfilled(table) is None for table in levers.MECHANISMS.values())
    fake = dataclasses.replace(levers.BY_NAME["priority"], name="fake-lever")
    with_fake = (*levers.LEVERS, fake)
    assert {kind for kind, table in levers.MECHANISMS.items() if levers.unfilled(table, with_fake)} == set(TABLES)
    # at import: each table's module, run afresh beside a registry that holds the fake lever, fails naming it
    monkeypatch.setattr(levers, "LEVERS", with_fake)
    for kind, module in TABLES.items():
        spec = importlib.util.find_spec(module)
        with pytest.raises(TypeError, match=rf"{kind} table .*no entry for lever\(s\) fake-lever"):
            spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_a_mechanism_naming_no_lever_fails():
    table = {lv.name: levers.NotApplicable("none") for lv in levers.LEVERS}
    assert levers.mechanisms("test", table)["priority"] == levers.NotApplicable("none")
    del levers.MECHANISMS["test"]
    with pytest.raises(TypeError, match="name no lever: nonesuch"):
        levers.mechanisms("test", table | {"nonesuch": levers.NotApplicable("none")})
    with pytest.raises(TypeError, match="no entry for lever.s. shape"):
        levers.mechanisms("test", {k: v for k, v in table.items() if k != "shape"})
    assert "test" not in levers.MECHANISMS
