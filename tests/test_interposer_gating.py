"""Auto mode made less blunt: drain chosen by grid, padding only while communication is in flight,
and the runtime policy switch. CPU only, against tests/fake_gpu (see test_interposer.py).

The fake driver's events complete at once unless held (FAKE_CUDA_HOLD_EVENTS=1, or the launcher's
fake_cuda_hold_events), and a stream can be marked capturing; an event call made during a capture
from a thread not in relaxed capture mode invalidates it, as in the real driver's global mode.
Auto mode's cost cap is off here (CCOVERLAP_KEEP=0), so each plan is applied: test_interposer_keep.py
tests the cap.
"""
import dataclasses
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_interposer import COMM, COMPUTE, KERNEL, clean_env, launch, policy_env

from ccoverlap.util.errors import UsageError
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.control.interposer import Policy, library_path, set_policy
from ccoverlap.model.limits import get_device
from ccoverlap.model.occupancy import pad_for_blocks
from ccoverlap.model.planner import _plan_raw, plan

# the footprint auto mode learned on two H200 from DDP's first NCCL kernel (docs/interposer.md)
ALLGATHER = KernelFootprint(128, 96, 21568, 82240)
ELEMENTWISE = KernelFootprint(128, 16, 0, 0)  # 16 blocks/SM of 128 threads
FOOTPRINTS = {"elementwise_kernel": ELEMENTWISE, "computeA_func": COMPUTE, "computeK_cudart_kernel": KERNEL}
H200 = get_device("h200")
ONE_WAVE, TWO_WAVES = 2 * H200.sm_count * 16 - 1, 2 * H200.sm_count * 16  # of the drain-1 plan (16 blocks/SM)



def pads(rows, path=None):
    return {r["kernel"]: r["shared"] - r["requested"] for r in rows if path is None or r["path"] == path}


def expected(kernel: str, grid: int, comm=ALLGATHER, drain=None) -> int:
    """What planner.plan pads this kernel by at this grid (0 when infeasible: launched unchanged)."""
    p = plan("h200", dataclasses.replace(FOOTPRINTS[kernel], grid=grid), comm, drain=drain)
    return p.pad_bytes if p.feasible else 0


STRICT_132 = plan("h200", dataclasses.replace(COMPUTE, grid=132), COMM, drain=None).pad_bytes  # one wave: drain 0


def test_the_h200_elementwise_kernel_needs_no_pad_once_one_block_may_drain():
    assert plan("h200", ELEMENTWISE, ALLGATHER, drain=0).pad_bytes == 115713  # 16 -> 1 block/SM
    relaxed = plan("h200", ELEMENTWISE, ALLGATHER, drain=1)
    assert relaxed.feasible and relaxed.pad_bytes == 0 and relaxed.compute_blocks_after == 16


def test_auto_pads_multi_wave_grids_by_the_drain_1_plan_and_agrees_with_the_planner(fake, tmp_path):
    stats = tmp_path / "s.json"
    grids = [132, ONE_WAVE, TWO_WAVES, 100000, 132]  # back to one wave: the memo keeps the classes apart
    rows, err = launch(fake, "waves", *grids, CCOVERLAP_MODE="auto", CCOVERLAP_KEEP=0, CCOVERLAP_GATE="always",
                       CCOVERLAP_STATS=stats)
    assert err == "" and all(r["rc"] == 0 for r in rows)
    by_grid = {g: pads(rows, str(g)) for g in grids}
    assert [by_grid[g]["elementwise_kernel"] for g in grids] == [115713, 115713, 0, 0, 115713]
    for g in grids:
        for kernel, pad in by_grid[g].items():
            assert pad == expected(kernel, g), (kernel, g)
    # at least one other kernel's boundary differs from the elementwise one's: not a fixed grid threshold
    assert by_grid[ONE_WAVE]["computeK_cudart_kernel"] == expected("computeK_cudart_kernel", ONE_WAVE, drain=1) > 0
    assert by_grid[132]["computeK_cudart_kernel"] == expected("computeK_cudart_kernel", 132, drain=0)
    assert by_grid[132]["computeK_cudart_kernel"] != by_grid[ONE_WAVE]["computeK_cudart_kernel"]
    data = json.loads(stats.read_text())
    assert data["drain"] == "auto" and data["gate"] == "always"
    assert data["skipped"]["no_pad_needed"] >= 2 and data["skipped"]["communication"] == 1


@pytest.mark.parametrize("drain", [0, 1])
def test_a_fixed_drain_ignores_the_grid(fake, drain):
    rows, _ = launch(fake, "waves", 132, 100000, CCOVERLAP_MODE="auto", CCOVERLAP_KEEP=0, CCOVERLAP_GATE="always",
                     CCOVERLAP_DRAIN=drain)
    for g in (132, 100000):
        for kernel, pad in pads(rows, str(g)).items():
            assert pad == expected(kernel, g, drain=drain), (kernel, g)
    assert pads(rows, "100000")["elementwise_kernel"] == (115713 if drain == 0 else 0)


@settings(max_examples=150, deadline=None)
@given(
    threads=st.integers(1, 32).map(lambda w: 32 * w), regs=st.integers(8, 128),
    dyn=st.integers(0, 64).map(lambda k: 1024 * k),
    grid=st.integers(1, 20000), comm_threads=st.sampled_from([128, 256, 640]),
)
def test_plan_auto_in_c_is_the_rule_planner_py_had(threads, regs, dyn, grid, comm_threads):
    """ccov_plan_auto (now behind plan(drain=None)) against the Python rule it replaced."""
    compute = KernelFootprint(threads, regs, 0, dyn, grid=grid)
    comm = KernelFootprint(comm_threads, 96, 21568, 82240)
    relaxed = _plan_raw(H200, compute, comm, 1, 1)
    waves = compute.grid / (H200.sm_count * max(relaxed.compute_blocks, 1))
    drain = 1 if relaxed.feasible and waves >= 2 else 0
    got = plan(H200, compute, comm, drain=None)
    assert got.drain == drain
    assert got.pad_bytes == plan(H200, compute, comm, drain=drain).pad_bytes


def test_auto_pads_only_while_a_comm_event_is_pending(fake, tmp_path):
    stats = tmp_path / "s.json"
    rows, err = launch(fake, "gate", CCOVERLAP_MODE="auto", CCOVERLAP_KEEP=0, CCOVERLAP_STATS=stats)
    assert err == ""
    strict = STRICT_132
    assert strict == plan("h200", COMPUTE, COMM, drain=0).pad_bytes > 0
    got = {r["path"]: r["shared"] - r["requested"] for r in rows if r.get("kernel") == "computeA_func"}
    assert got == {
        "before_comm": 0,  # comm_unknown
        "pending": strict,
        "completed": 0,  # comm_idle: its event completed
        "pending2": strict,
        "completed2": 0,
        "capturing": strict,  # a comm launch on a capturing stream counts until the capture ends
        "capturing_events_done": strict,
        "capture_ended": 0,
    }
    (idle,) = [r for r in rows if r["path"] == "idle"]
    assert idle["queries"] == 0  # nothing pending: no driver call at all
    (counters,) = [r for r in rows if r["path"] == "counters"]
    assert counters["invalidated"] == 0  # queries during the capture ran in relaxed mode
    assert counters["recorded_in_capture"] == 0  # never records into a capture
    assert counters["created"] == 1  # one event per stream, reused
    assert counters["records"] == 4  # comm, comm2, comm3, comm_before_capture
    data = json.loads(stats.read_text())
    assert data["gate"] == "comm" and data["gate_fallback"] is False
    assert data["padded"] == 4 and data["skipped"]["communication"] == 5
    assert data["skipped"]["comm_idle"] == 3 + 1000 and data["skipped"]["comm_unknown"] == 1


def test_gate_always_pads_as_before_and_records_nothing(fake):
    rows, _ = launch(fake, "gate", CCOVERLAP_MODE="auto", CCOVERLAP_KEEP=0, CCOVERLAP_GATE="always")
    got = {r["path"]: r["shared"] - r["requested"] for r in rows if r.get("kernel") == "computeA_func"}
    assert got["before_comm"] == 0 and set(got.values()) - {0} == {got["completed"]} and got["completed"] > 0
    (counters,) = [r for r in rows if r["path"] == "counters"]
    assert counters["records"] == counters["queries"] == counters["created"] == 0


def test_pad_mode_is_ungated_unless_asked(fake):
    rows, _ = launch(fake, "gate", CCOVERLAP_PAD_BYTES=512)
    assert {r["shared"] - r["requested"] for r in rows if r.get("kernel") == "computeA_func"} == {512}
    rows, _ = launch(fake, "gate", CCOVERLAP_PAD_BYTES=512, CCOVERLAP_GATE="comm")
    got = {r["path"]: r["shared"] - r["requested"] for r in rows if r.get("kernel") == "computeA_func"}
    assert got["before_comm"] == got["completed"] == got["capture_ended"] == 0
    assert got["pending"] == got["capturing"] == 512


def test_failed_event_record_pads_as_if_comm_always_ran(fake, tmp_path):
    stats = tmp_path / "s.json"
    rows, err = launch(fake, "gate", CCOVERLAP_MODE="auto", CCOVERLAP_KEEP=0, CCOVERLAP_STATS=stats,
                       FAKE_CUDA_FAIL_EVENT_RECORD=1)
    got = {r["path"]: r["shared"] - r["requested"] for r in rows if r.get("kernel") == "computeA_func"}
    assert got["completed"] == got["pending"] > 0 and got["capture_ended"] > 0
    assert err.count("\n") == 1 and "recording an event after a communication launch failed" in err
    data = json.loads(stats.read_text())
    assert data["gate_fallback"] is True and "comm_idle" not in data["skipped"]


@pytest.mark.parametrize("hold", [0, 1])
def test_hip_gates_on_its_events(fake, hold):
    rows, _ = launch(fake, "hip", CCOVERLAP_MODE="auto", FAKE_HIP_HOLD_EVENTS=hold)
    rccl = KernelFootprint(256, 128, 0, 1024)
    stub = next(r for r in rows if r["kernel"] == "hip_elementwise_kernel")
    dlsym = next(r for r in rows if r["path"] == "hip_dlsym")
    if hold:
        assert stub["shared"] - 1024 == plan("mi250x", KernelFootprint(256, 32, 512, 1024), rccl).pad_bytes > 0
        assert dlsym["shared"] - 2048 == plan("mi250x", KernelFootprint(256, 64, 0, 2048), rccl).pad_bytes > 0
    else:
        assert stub["shared"] == 1024 and dlsym["shared"] == 2048  # comm_idle


def test_set_policy_switches_mode_and_numbers_mid_process(fake, tmp_path):
    stats = tmp_path / "s.json"
    rows, err = launch(fake, "switch", CCOVERLAP_PAD_BYTES=512, CCOVERLAP_KEEP=0, CCOVERLAP_STATS=stats)
    assert err == ""
    got = {r["path"]: r["shared"] - r["requested"] for r in rows if r.get("kernel") == "computeA_func"}
    rc = {r["step"]: r["set_rc"] for r in rows if r["path"] == "set"}
    blocks2 = pad_for_blocks("h200", COMPUTE, 2)
    assert got == {
        "start": 512, "off": 0, "pad4096": 4096,
        "pad8192": 8192,  # the same shape again: its memo from pad4096 was dropped
        "blocks2": blocks2, "bad_pad": blocks2, "bad_blocks": blocks2, "bad_mode": blocks2,  # refused: no change
        "auto": 0,  # no comm kernel seen yet
        "auto_after_comm": STRICT_132,
    }
    assert rc == {"off": 0, "pad4096": 0, "pad8192": 0, "blocks2": 0, "bad_pad": -1, "bad_blocks": -1,
                  "bad_mode": -1, "auto": 0}
    data = json.loads(stats.read_text())
    assert data["mode"] == "auto" and data["pad_bytes"] == 8192 and data["blocks"] == 2
    assert data["policy_changes"] == 5
    assert data["launches"] == 11 and data["padded"] == 8  # counting went on across every switch
    assert data["skipped"] == {"communication": 1, "comm_unknown": 1, "mode_off": 1}


def test_set_policy_under_concurrent_launches(fake):
    threads, per = 8, 20000
    ((r,), _) = launch(fake, "switch_threads", threads, per, CCOVERLAP_PAD_BYTES=512)
    assert r["bad_pads"] == 0  # every launch got off, pad 256 or pad 512: never a mix
    assert r["last_ok"] == threads  # after the last switch no older memo survives
    assert r["launches"] >= threads * per + threads


def test_set_policy_from_python_in_a_preloaded_process(fake, tmp_path):
    script = f"""
import ctypes, json
from ccoverlap.util.errors import UsageError
from ccoverlap.control.interposer import set_policy
cuda = ctypes.CDLL({str(fake / "libcuda.so.1")!r}, mode=ctypes.RTLD_GLOBAL)
cuda.fake_function.restype = ctypes.c_void_p
cuda.fake_function.argtypes = [ctypes.c_char_p] + [ctypes.c_int] * 4
cuda.fake_last_shared.argtypes = [ctypes.c_void_p]
f = cuda.fake_function(b"computeA_func", 0, 16, 0, 0)
launch = ctypes.CDLL(None).cuLaunchKernel_ptsz  # the interposer's: it is preloaded
launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
out = {{}}
def run(name):
    assert launch(f, 132, 1, 1, 256, 1, 1, 1024, None, None, None) == 0
    out[name] = cuda.fake_last_shared(f) - 1024
run("start")
set_policy("pad", 4096); run("pad")
set_policy("off"); run("off")
set_policy("blocks", 2); run("blocks")
try:
    set_policy("pad", 0)
except UsageError as e:
    out["error"] = str(e)
run("after_error")
print(json.dumps(out))
"""
    env = clean_env(CCOVERLAP_PAD_BYTES=100, LD_PRELOAD=library_path())
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    blocks2 = pad_for_blocks("h200", COMPUTE, 2)
    assert out == {"start": 100, "pad": 4096, "off": 0, "blocks": blocks2, "after_error": blocks2,
                   "error": "CCOVERLAP_PAD_BYTES=0 is out of range: valid 1..1048575"}


def test_set_policy_without_the_interposer_says_so():
    with pytest.raises(RuntimeError, match="the interposer is not preloaded"):
        set_policy("off")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("fast",), "mode 'fast' is not a mode: valid off, pad, blocks, auto"),
        (("pad",), "mode pad needs a whole number: CCOVERLAP_PAD_BYTES valid 1..1048575"),
        (("pad", 0), "CCOVERLAP_PAD_BYTES=0 is out of range: valid 1..1048575"),
        (("blocks", 2049), "CCOVERLAP_BLOCKS=2049 is out of range: valid 1..2048"),
        (("blocks", True), "mode blocks needs a whole number"),
        (("auto", 3), "mode auto takes no value"),
    ],
)
def test_set_policy_validates_like_policy(args, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        set_policy(*args)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"CCOVERLAP_DRAIN": "some"}, "CCOVERLAP_DRAIN=some is not auto or a whole number: valid auto or 0..64"),
        ({"CCOVERLAP_DRAIN": "65"}, "CCOVERLAP_DRAIN=65 is out of range: valid auto or 0..64"),
        ({"CCOVERLAP_DRAIN": "-1"}, "CCOVERLAP_DRAIN=-1 is out of range: valid auto or 0..64"),
        ({"CCOVERLAP_GATE": "sometimes"}, "CCOVERLAP_GATE=sometimes is not a gate: valid comm, always"),
    ],
)
def test_policy_rejects_bad_drain_and_gate(environ, message):
    with pytest.raises(UsageError) as exc:
        Policy.from_environ(environ)
    assert str(exc.value) == message


def test_drain_and_gate_round_trip(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"mode": "auto", "drain": 2, "gate": "always"}')
    p = Policy.from_environ({"CCOVERLAP_POLICY": str(path)})
    assert (p.drain, p.gate) == (2, "always") and Policy.from_environ(policy_env(p)) == p
    path.write_text('{"mode": "auto", "drain": "auto"}')
    assert Policy.from_environ({"CCOVERLAP_POLICY": str(path)}) == Policy(mode="auto")
    assert policy_env(Policy(mode="auto"))["CCOVERLAP_DRAIN"] == ""  # the default stays implicit


def test_run_passes_drain_and_gate(fake, tmp_path):
    stats = tmp_path / "s.json"
    out = subprocess.run(
        [sys.executable, "-m", "ccoverlap", "run", "--mode", "auto", "--drain", "0", "--gate", "always", "--keep", "0",
         "--stats", str(stats), "--", str(fake / "launcher"), "waves", "100000"],
        env=clean_env(), capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert pads([json.loads(line) for line in out.stdout.splitlines()], "100000")["elementwise_kernel"] == 115713
    data = json.loads(stats.read_text())
    assert data["drain"] == 0 and data["gate"] == "always"
    bad = subprocess.run([sys.executable, "-m", "ccoverlap", "run", "--drain", "x", "--", "true"], env=clean_env(),
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "CCOVERLAP_DRAIN=x is not auto or a whole number" in bad.stderr


def test_comm_events_from_many_threads_end_idle(fake, tmp_path):
    """Threads launch comm (own streams and one shared) and compute while events complete; once all
    have completed the count of slots in use is back to zero: idle costs no query again."""
    stats = tmp_path / "s.json"
    threads, per = 8, 4000
    ((r,), err) = launch(fake, "gate_threads", threads, per, CCOVERLAP_MODE="auto", CCOVERLAP_KEEP=0,
                         CCOVERLAP_STATS=stats)
    assert err == ""
    assert r == {"pending_padded": 1, "idle_shared": 1024, "idle_queries": 0, "created": r["created"]}
    assert threads + 1 <= r["created"] <= 64  # about one event per stream
    data = json.loads(stats.read_text())
    assert data["gate_fallback"] is False and data["skipped"]["communication"] == threads * per // 4 + 1
    assert data["launches"] == threads * per + 4  # the workers', then one comm and three compute
