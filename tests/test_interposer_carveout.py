"""The carveout hints (policy `carveout`, `comm_carveout`): compute kernels, and communication kernels, get
CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, each side its own field's value, once per handle and device, in
every mode. CPU only, against tests/fake_gpu (see test_interposer.py).

`launcher carveout T N` runs T threads (thread i on device i % 2) launching the CUfunction computeA_func (device 0
only: a CUfunction belongs to one context), the CUkernel computeK_cudart_kernel (on both devices), the NCCL kernel
and a kernel launched cooperatively, N rounds each; the fake driver records every attribute-9 call per handle and
device with its value.
"""
import json
import subprocess
import sys

import pytest
from test_interposer import clean_env, launch
from test_interposer_gpu import gpu

from ccoverlap.control import levers
from ccoverlap.control.interposer import BY_KEY, LaunchStats, Policy
from ccoverlap.control.levers import LEVERS

COMPUTE, KERNEL, COMM, COOP = ("computeA_func", "computeK_cudart_kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                               "coop_grid_sync_kernel")
#: the calls each kernel gets per device when the hint is set: once per handle and device, compute kernels only
ONCE = {COMPUTE: [1, 0], KERNEL: [1, 1], COMM: [0, 0], COOP: [0, 0]}
NEVER = dict.fromkeys(ONCE, [0, 0])


def run_carveout(fake, threads=2, rounds=3, **policy):
    rows, err = launch(fake, "carveout", threads, rounds, **policy)
    return {r["kernel"]: r for r in rows}, err


def calls(rows):
    return {k: r["calls"] for k, r in rows.items()}


def launches_of(threads, rounds):
    """Launches per kernel: the CUfunction only on the device-0 threads."""
    everywhere = threads * rounds
    return {COMPUTE: (threads + 1) // 2 * rounds, KERNEL: everywhere, COMM: everywhere, COOP: everywhere}


@pytest.mark.parametrize("mode", [{"CCOVERLAP_MODE": "off"}, {"CCOVERLAP_MODE": "auto"}, {"CCOVERLAP_PAD_BYTES": 512},
                                  {"CCOVERLAP_BLOCKS": 2}], ids=lambda m: "-".join(map(str, m.values())))
def test_set_once_per_handle_and_device_in_every_mode(fake, tmp_path, mode):
    stats = tmp_path / "s.json"
    rows, err = run_carveout(fake, CCOVERLAP_CARVEOUT=100, CCOVERLAP_STATS=stats, **mode)
    assert err == ""
    assert calls(rows) == ONCE  # two devices: the CUkernel twice; never comm, nor a cooperative kernel
    assert rows[COMPUTE]["value"] == [100, 0] and rows[KERNEL]["value"] == [100, 100]
    assert {k: r["launches"] for k, r in rows.items()} == launches_of(2, 3)  # every launch went out
    data = json.loads(stats.read_text())
    assert data["carveout"] == 100 and data["carveout_set"] == 3 and data["carveout_skipped"] == {"cooperative": 1}
    kernels = {k["name"]: k for k in data["kernels"]}
    assert {name: kernels[name]["carveout_set"] for name in ONCE} == {COMPUTE: 1, KERNEL: 2, COMM: 0, COOP: 0}
    assert kernels[COOP]["carveout_skipped"] == {"cooperative": 1}


def test_mode_off_sets_the_hint_and_pads_nothing(fake, tmp_path):
    stats = tmp_path / "s.json"
    rows, _ = run_carveout(fake, CCOVERLAP_CARVEOUT=100, CCOVERLAP_STATS=stats)
    assert calls(rows) == ONCE
    assert all(r["shared_sum"] == r["launches"] * r["requested"] for r in rows.values())  # dynamic smem unchanged
    data = json.loads(stats.read_text())
    assert data["mode"] == "off" and data["padded"] == 0


def test_the_value_is_the_policys_and_pads_still_apply(fake):
    rows, _ = run_carveout(fake, CCOVERLAP_CARVEOUT=60, CCOVERLAP_PAD_BYTES=512)
    assert rows[COMPUTE]["value"] == [60, 0] and rows[KERNEL]["value"] == [60, 60]
    for name in (COMPUTE, KERNEL):
        assert rows[name]["shared_sum"] == rows[name]["launches"] * (1024 + 512)
    rows, _ = run_carveout(fake, CCOVERLAP_CARVEOUT=0)  # 0 is a value (prefer L1), not "unset"
    assert calls(rows) == ONCE and rows[KERNEL]["value"] == [0, 0]


def test_never_set_when_unset(fake, tmp_path):
    stats = tmp_path / "s.json"
    rows, _ = run_carveout(fake, CCOVERLAP_PAD_BYTES=512, CCOVERLAP_STATS=stats)
    assert calls(rows) == NEVER
    data = json.loads(stats.read_text())
    assert data["carveout"] is None and data["carveout_set"] == 0 and data["carveout_skipped"] == {}


@pytest.mark.parametrize(("regexes", "hinted"), [
    ({"CCOVERLAP_EXCLUDE": "cudart"}, {COMPUTE: [1, 0], KERNEL: [0, 0]}),
    ({"CCOVERLAP_INCLUDE": "^computeK"}, {COMPUTE: [0, 0], KERNEL: [1, 1]}),
    ({"CCOVERLAP_COMM": "A_func$"}, {COMPUTE: [0, 0], KERNEL: [1, 1]}),
])
def test_include_exclude_and_comm_regexes_apply_as_to_pads(fake, regexes, hinted):
    rows, _ = run_carveout(fake, CCOVERLAP_CARVEOUT=100, **regexes)
    assert calls(rows) == ONCE | hinted


def test_many_threads_still_set_it_once(fake, tmp_path):
    stats = tmp_path / "s.json"
    threads, rounds = 8, 3000
    rows, err = run_carveout(fake, threads, rounds, CCOVERLAP_CARVEOUT=100, CCOVERLAP_STATS=stats)
    assert err == "" and calls(rows) == ONCE
    assert {k: r["launches"] for k, r in rows.items()} == launches_of(threads, rounds)
    assert json.loads(stats.read_text())["carveout_set"] == 3


def test_first_launches_racing_on_two_devices_make_one_entry_per_handle_and_device(fake, tmp_path):
    """16 threads on two devices make the first launch of the same fresh handles together, while each name look-up
    takes 200 us: a CUfunction (not per device) is still described, hinted and counted once, a CUkernel once per
    device. Before the fix a thread on the other device inserted a second entry (the flaky `cooperative: 2`)."""
    stats = tmp_path / "s.json"
    threads, handles = 16, 64
    (row,), err = launch(fake, "first", threads, handles, CCOVERLAP_CARVEOUT=100, CCOVERLAP_STATS=stats,
                         FAKE_CUDA_SLOW_NAME=200)
    assert err == ""
    assert row == {"handles": handles, "launches": 3 * threads * handles, "functions_not_set_once": 0,
                   "kernels_not_set_once_per_device": 0, "cooperative_set": 0}
    data = json.loads(stats.read_text())
    assert data["carveout_set"] == 3 * handles and data["carveout_skipped"] == {"cooperative": handles}
    assert all(k["carveout_set"] + sum(k["carveout_skipped"].values()) == (2 if "_kernel" in k["name"] else 1)
               for k in data["kernels"]), data["kernels"]


def test_a_refused_hint_logs_once_is_not_retried_and_launches_go_out(fake, tmp_path):
    stats = tmp_path / "s.json"
    rows, err = run_carveout(fake, 2, 50, CCOVERLAP_CARVEOUT=100, CCOVERLAP_PAD_BYTES=512, CCOVERLAP_STATS=stats,
                             FAKE_CUDA_FAIL_CARVEOUT=1)
    assert calls(rows) == ONCE  # one attempt per handle and device
    assert {k: r["launches"] for k, r in rows.items()} == launches_of(2, 50)
    assert rows[KERNEL]["shared_sum"] == rows[KERNEL]["launches"] * (1024 + 512)  # the pad does not depend on it
    assert err.count("\n") == 1 and "setting the shared-memory carveout of" in err and "to 100% failed" in err
    data = json.loads(stats.read_text())
    assert data["carveout_set"] == 0 and data["carveout_skipped"] == {"attribute_failed": 3, "cooperative": 1}


def test_hip_ignores_the_field_and_says_so_once(fake, tmp_path):
    stats = tmp_path / "s.json"
    rows, err = launch(fake, "hip", CCOVERLAP_CARVEOUT=100, CCOVERLAP_STATS=stats)
    assert err.count("\n") == 1 and "carveout: n/a on HIP (" in err
    assert all(r["rc"] == 0 and r["shared"] == r["requested"] and r["set_calls"] == 0 for r in rows)
    data = json.loads(stats.read_text())
    assert data["carveout"] == 100 and data["carveout_set"] == 0
    assert data["carveout_skipped"] == {"n/a": 2}  # the two compute kernels; rccl is communication
    rows, _ = launch(fake, "hip", CCOVERLAP_CARVEOUT=100, CCOVERLAP_PAD_BYTES=4096)
    assert {r["shared"] - r["requested"] for r in rows if "rccl" not in r["kernel"]} == {4096}


@pytest.mark.parametrize(("option", "key", "hinted"), [
    ("--carveout", "carveout", ONCE),
    ("--comm-carveout", "comm_carveout", {COMPUTE: 0, KERNEL: 0, COMM: 1, COOP: 0}),  # a CUfunction: once, one device
], ids=["carveout", "comm_carveout"])
def test_ccoverlap_run_passes_it_and_refuses_bad_values(fake, tmp_path, option, key, hinted):
    stats = tmp_path / "s.json"
    out = subprocess.run(
        [sys.executable, "-m", "ccoverlap", "run", option, "100", "--stats", str(stats), "--",
         str(fake / "launcher"), "carveout", "2", "1"],
        env=clean_env(), capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stderr
    got = calls({json.loads(line)["kernel"]: json.loads(line) for line in out.stdout.splitlines()})
    assert got == hinted if key == "carveout" else {k: sum(n) for k, n in got.items()} == hinted
    assert json.loads(stats.read_text())[key] == 100
    env = BY_KEY[key].env
    for bad, message in [("101", f"{env}=101 is out of range: valid 0..100"),
                         ("max", f"{env}=max is not a whole number")]:
        refused = subprocess.run([sys.executable, "-m", "ccoverlap", "run", option, bad, "--", "true"],
                                 env=clean_env(), capture_output=True, text=True, timeout=60, check=False)
        assert refused.returncode == 2 and refused.stderr == f"ccoverlap run: error: {message}\n"


# --- comm_carveout: the same hint on the communication side ---------------------------------------------------

def test_comm_carveout_hints_communication_kernels_once_and_compute_not(fake, tmp_path):
    """One thread on device 0: the NCCL kernel (a CUfunction) gets the attribute once, with the field's value; no
    compute kernel gets any; the stats count it apart from the compute side's hints."""
    stats = tmp_path / "s.json"
    rows, err = run_carveout(fake, 1, 5, CCOVERLAP_COMM_CARVEOUT=100, CCOVERLAP_STATS=stats)
    assert err == ""
    assert calls(rows) == NEVER | {COMM: [1, 0]} and rows[COMM]["value"][0] == 100
    assert {k: r["launches"] for k, r in rows.items()} == launches_of(1, 5)  # every launch went out
    data = json.loads(stats.read_text())
    assert (data["carveout"], data["comm_carveout"]) == (None, 100)
    assert (data["carveout_set"], data["carveout_skipped"]) == (0, {})
    assert (data["comm_carveout_set"], data["comm_carveout_skipped"]) == (1, {})
    kernels = {k["name"]: k for k in data["kernels"]}
    assert {name: (kernels[name]["carveout_set"], kernels[name]["comm_carveout_set"]) for name in ONCE} == {
        COMPUTE: (0, 0), KERNEL: (0, 0), COMM: (0, 1), COOP: (0, 0)}
    seen = LaunchStats.read([stats])
    assert (seen.carveout_set, seen.comm_carveout_set) == (0, 1)
    assert levers.took_effect([("comm-carveout-hint", "100"), ("carveout-hint", "100")], seen) == {
        "comm-carveout-hint": True, "carveout-hint": False}


@pytest.mark.parametrize("mode", [{"CCOVERLAP_MODE": "off"}, {"CCOVERLAP_MODE": "auto"}, {"CCOVERLAP_PAD_BYTES": 512}],
                         ids=lambda m: "-".join(map(str, m.values())))
def test_with_both_fields_each_side_gets_its_own_value(fake, tmp_path, mode):
    stats = tmp_path / "s.json"
    rows, err = run_carveout(fake, 1, 3, CCOVERLAP_CARVEOUT=60, CCOVERLAP_COMM_CARVEOUT=90, CCOVERLAP_STATS=stats,
                             **mode)
    assert err == ""
    assert calls(rows) == {COMPUTE: [1, 0], KERNEL: [1, 0], COMM: [1, 0], COOP: [0, 0]}
    assert (rows[COMPUTE]["value"][0], rows[KERNEL]["value"][0], rows[COMM]["value"][0]) == (60, 60, 90)
    data = json.loads(stats.read_text())
    assert (data["carveout"], data["comm_carveout"], data["carveout_set"], data["comm_carveout_set"]) == (60, 90, 2, 1)
    assert data["carveout_skipped"] == {"cooperative": 1} and data["comm_carveout_skipped"] == {}


def test_comm_carveout_from_many_threads_on_two_devices_is_set_once(fake, tmp_path):
    """8 threads on two devices: the CUfunction NCCL kernel is one entry, hinted once, on whichever device first
    launched it; the compute side as before."""
    stats = tmp_path / "s.json"
    threads, rounds = 8, 3000
    rows, err = run_carveout(fake, threads, rounds, CCOVERLAP_CARVEOUT=100, CCOVERLAP_COMM_CARVEOUT=100,
                             CCOVERLAP_STATS=stats)
    assert err == ""
    assert {k: v for k, v in calls(rows).items() if k != COMM} == {k: v for k, v in ONCE.items() if k != COMM}
    assert sorted(rows[COMM]["calls"]) == [0, 1] and max(rows[COMM]["value"]) == 100
    assert {k: r["launches"] for k, r in rows.items()} == launches_of(threads, rounds)
    data = json.loads(stats.read_text())
    assert (data["carveout_set"], data["comm_carveout_set"]) == (3, 1)


def test_a_refused_comm_hint_logs_once_and_is_counted_on_its_side(fake, tmp_path):
    stats = tmp_path / "s.json"
    rows, err = run_carveout(fake, 1, 20, CCOVERLAP_COMM_CARVEOUT=100, CCOVERLAP_STATS=stats,
                             FAKE_CUDA_FAIL_CARVEOUT=1)
    assert calls(rows) == NEVER | {COMM: [1, 0]}  # one attempt
    assert err.count("\n") == 1 and f"carveout of {COMM} to 100% failed" in err and "(comm_carveout)" in err
    data = json.loads(stats.read_text())
    assert data["comm_carveout_set"] == 0 and data["comm_carveout_skipped"] == {"attribute_failed": 1}
    assert data["carveout_skipped"] == {}


def test_hip_ignores_comm_carveout_and_says_so_once(fake, tmp_path):
    stats = tmp_path / "s.json"
    rows, err = launch(fake, "hip", CCOVERLAP_COMM_CARVEOUT=100, CCOVERLAP_STATS=stats)
    assert err.count("\n") == 1 and "comm_carveout: n/a on HIP (" in err
    assert all(r["rc"] == 0 and r["set_calls"] == 0 for r in rows)
    data = json.loads(stats.read_text())
    assert data["comm_carveout_skipped"] == {"n/a": 1} and data["carveout_skipped"] == {}  # rccl: the one comm kernel


def test_every_levers_policy_is_a_policy_the_interposer_takes():
    """carveout-hint sets the field `carveout`: every lever's policy fields exist and its default value parses."""
    for lever in LEVERS:
        policy = lever.setting(lever.value(None)).policy
        parsed = Policy.from_environ({BY_KEY[key].env: value for key, value in policy.items()})
        assert {key: str(getattr(parsed, key)) for key in policy} == dict(policy), lever.name
    assert Policy.from_environ({"CCOVERLAP_CARVEOUT": "100"}).carveout == 100 and Policy().carveout is None
    assert Policy.from_environ({"CCOVERLAP_COMM_CARVEOUT": "90"}).comm_carveout == 90 and Policy().comm_carveout is None


PROBE = """
import ctypes, json, torch
from ccoverlap.gpu import cuda_driver as cu
from ccoverlap.lab import kernels
from ccoverlap.model import limits
torch.zeros(1, device="cuda")  # the primary context, current
sleep = kernels.build(limits.read_live(0).arch, ["sleep_kernel"])["sleep_kernel"]  # a CUkernel, 0 B shared memory
def hint():
    return cu.driver().kernel_attribute(cu.FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT, sleep.handle, 0)
before = hint()
sleep.launch(1, 32, 0, [ctypes.c_ulonglong(1000)])  # through the preloaded cuLaunchKernelEx
torch.cuda.synchronize()
print(json.dumps({"before": before, "after": hint()}))
"""


@pytest.mark.gpu
def test_on_a_gpu_the_driver_reports_the_hint_and_results_do_not_change(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    stats = tmp_path / "s.json"
    out = subprocess.run([sys.executable, "-m", "ccoverlap", "run", "--carveout", "100", "--stats", str(stats), "--",
                          sys.executable, "-c", PROBE], env=clean_env(), capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["before"] != 100 and got["after"] == 100, got
    data = json.loads(stats.read_text())
    kernels = {k["name"]: k for k in data["kernels"]}
    assert kernels["sleep_kernel"]["carveout_set"] == 1 and data["carveout_skipped"] == {}, data
    gpu.run_workload(tmp_path / "base.pt")
    gpu.run_workload(tmp_path / "hint.pt", ["--carveout", "100", "--pad-bytes", "8192"], tmp_path / "hint.json")
    assert all(gpu.identical(tmp_path / "base.pt", tmp_path / "hint.pt").values())
    assert json.loads((tmp_path / "hint.json").read_text())["carveout_set"] > 0
