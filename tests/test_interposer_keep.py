"""Auto mode's cost cap (CCOVERLAP_KEEP): a pad that leaves fewer than keep% of a kernel's unpadded
blocks per SM is not applied. CPU only, against tests/fake_gpu (see test_interposer.py).

NCCL's Hopper CTA (640 threads x 96 registers, 104,832 B of shared memory) needs almost a whole SM,
so the strict plan leaves one compute block per SM whatever the kernel (16 -> 1 for an elementwise
kernel); on an H200 that slowed kernels 1.5-2x while NCCL used 16 SMs.
"""
import json
import subprocess
import sys

import pytest
from test_interposer import COMM, clean_env, launch, policy_env

from ccoverlap.util.errors import UsageError
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.control.interposer import Policy
from ccoverlap.model.occupancy import pad_for_blocks
from ccoverlap.model.planner import plan

# name -> (threads, regs, dynamic smem, grid); launched after the Hopper comm kernel (launcher.c: keep)
KERNELS = {
    "elementwise_kernel": (128, 16, 0, 132),  # one wave: strict plan, 16 -> 1 block/SM
    "tile_kernel": (256, 16, 100000, 132),  # 2 -> 1: keeps exactly 50%
    "elementwise_waves_kernel": (128, 16, 0, 100000),  # multi-wave, drain 1: 16 -> 3 (18.75%)
    "compute_waves_kernel": (256, 16, 1024, 100000),  # multi-wave, drain 1: 8 -> 2 (25%)
}


def spec(name):
    threads, regs, dyn, grid = KERNELS[name]
    return f"{name}:{threads}:{regs}:{dyn}:{grid}"


def footprint(name):
    threads, regs, dyn, grid = KERNELS[name]
    return KernelFootprint(threads, regs, 0, dyn, grid=grid)


def run_keep(fake, *names, **policy):
    rows, err = launch(fake, "keep", *map(spec, names), **policy)
    assert all(r["rc"] == 0 for r in rows), rows
    return {r["kernel"]: r["shared"] - r["requested"] for r in rows if r["path"] != "comm"}, err



def test_the_plans_cost_what_the_cases_say():
    plans = {n: plan("h200", footprint(n), COMM, drain=None) for n in KERNELS}
    got = {n: (p.compute_blocks_before, p.compute_blocks_after) for n, p in plans.items()}
    assert got == {"elementwise_kernel": (16, 1), "tile_kernel": (2, 1), "elementwise_waves_kernel": (16, 3),
                   "compute_waves_kernel": (8, 2)}


def test_auto_does_not_pad_16_to_1_by_default_and_does_with_keep_0(fake, tmp_path):
    stats = tmp_path / "s.json"
    pads, err = run_keep(fake, "elementwise_kernel", CCOVERLAP_MODE="auto", CCOVERLAP_STATS=stats)
    assert err == "" and pads == {"elementwise_kernel": 0}
    data = json.loads(stats.read_text())
    assert data["keep"] == 50 and data["padded"] == 0
    assert data["skipped"] == {"communication": 1, "too_costly": 1}

    pads, _ = run_keep(fake, "elementwise_kernel", CCOVERLAP_MODE="auto", CCOVERLAP_KEEP=0, CCOVERLAP_STATS=stats)
    assert plan("h200", footprint("elementwise_kernel"), COMM).pad_bytes == 115713
    assert pads == {"elementwise_kernel": 115713}
    data = json.loads(stats.read_text())
    assert data["keep"] == 0 and data["padded"] == 1 and "too_costly" not in data["skipped"]


def test_a_plan_that_keeps_half_is_padded_at_keep_50(fake, tmp_path):
    stats = tmp_path / "s.json"
    pads, _ = run_keep(fake, "tile_kernel", "elementwise_kernel", CCOVERLAP_MODE="auto", CCOVERLAP_KEEP=50,
                       CCOVERLAP_STATS=stats)
    assert pads == {"tile_kernel": plan("h200", footprint("tile_kernel"), COMM).pad_bytes, "elementwise_kernel": 0}
    assert pads["tile_kernel"] > 0
    data = json.loads(stats.read_text())
    assert data["padded"] == 1 and data["skipped"]["too_costly"] == 1


@pytest.mark.parametrize("keep", [0, 1, 6, 7, 18, 19, 25, 26, 50, 51, 100])
def test_the_cap_is_blocks_after_times_100_against_keep_times_blocks_before(fake, keep):
    pads, _ = run_keep(fake, *KERNELS, CCOVERLAP_MODE="auto", CCOVERLAP_KEEP=keep)
    for name in KERNELS:
        p = plan("h200", footprint(name), COMM, drain=None)
        kept = keep == 0 or p.compute_blocks_after * 100 >= keep * p.compute_blocks_before
        assert pads[name] == (p.pad_bytes if kept else 0), (name, keep)


def test_the_cap_applies_to_a_fixed_drain_too(fake):
    pads, _ = run_keep(fake, "elementwise_waves_kernel", CCOVERLAP_MODE="auto", CCOVERLAP_DRAIN=0)
    assert pads == {"elementwise_waves_kernel": 0}
    pads, _ = run_keep(fake, "elementwise_waves_kernel", CCOVERLAP_MODE="auto", CCOVERLAP_DRAIN=0, CCOVERLAP_KEEP=0)
    strict = plan("h200", footprint("elementwise_waves_kernel"), COMM, drain=0)
    assert strict.compute_blocks_after == 1 and pads == {"elementwise_waves_kernel": strict.pad_bytes}


def test_the_cap_leaves_pad_and_blocks_modes_alone(fake):
    pads, _ = run_keep(fake, "elementwise_kernel", CCOVERLAP_BLOCKS=1, CCOVERLAP_KEEP=100)
    assert pads == {"elementwise_kernel": pad_for_blocks("h200", footprint("elementwise_kernel"), 1)}
    pads, _ = run_keep(fake, "elementwise_kernel", CCOVERLAP_PAD_BYTES=115713, CCOVERLAP_KEEP=100)
    assert pads == {"elementwise_kernel": 115713}


BAD_KEEPS = [
    ({"CCOVERLAP_KEEP": "101"}, "CCOVERLAP_KEEP=101 is out of range: valid 0..100"),
    ({"CCOVERLAP_KEEP": "-1"}, "CCOVERLAP_KEEP=-1 is out of range: valid 0..100"),
    ({"CCOVERLAP_KEEP": "half"}, "CCOVERLAP_KEEP=half is not a whole number"),
    ({"policy": '{"mode": "auto", "keep": "50"}'}, '"keep" must be a whole number'),
    ({"policy": '{"mode": "auto", "keep": 50.5}'}, '"keep" must be a whole number'),
    ({"policy": '{"mode": "auto", "keep": 200}'}, "CCOVERLAP_KEEP=200 is out of range: valid 0..100"),
]


def environ(spec_, tmp_path):
    env = dict(spec_)
    if "policy" in env:
        path = tmp_path / "policy.json"
        path.write_text(env.pop("policy"))
        env["CCOVERLAP_POLICY"] = str(path)
    return env


@pytest.mark.parametrize(("bad", "message"), BAD_KEEPS)
def test_bad_keep_is_rejected_by_the_library_and_by_policy(fake, tmp_path, bad, message):
    stats = tmp_path / "s.json"
    env = environ(bad, tmp_path)
    rows, err = launch(fake, "keep", spec("elementwise_kernel"), CCOVERLAP_MODE="auto",
                       CCOVERLAP_STATS=stats, **env)
    assert all(r["rc"] == 0 and r["shared"] == r["requested"] for r in rows)
    assert err.count("\n") == 1 and message in err and "passes through unchanged" in err
    assert json.loads(stats.read_text())["skipped"] == {"policy_invalid": 2}
    with pytest.raises(UsageError) as exc:
        Policy.from_environ({"CCOVERLAP_MODE": "auto", **env})
    assert message in str(exc.value)
    if "policy" not in bad:
        assert str(exc.value) == message


def test_keep_round_trips_and_ccoverlap_run_passes_it(fake, tmp_path):
    assert Policy().keep == 50 and Policy.from_environ({"CCOVERLAP_KEEP": "0"}).keep == 0
    path = tmp_path / "p.json"
    path.write_text('{"mode": "auto", "keep": 30}')
    p = Policy.from_environ({"CCOVERLAP_POLICY": str(path)})
    assert p.keep == 30 and Policy.from_environ(policy_env(p)) == p
    stats = tmp_path / "s.json"
    out = subprocess.run(
        [sys.executable, "-m", "ccoverlap", "run", "--mode", "auto", "--keep", "0", "--stats", str(stats), "--",
         str(fake / "launcher"), "keep", spec("elementwise_kernel")],
        env=clean_env(), capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(stats.read_text())["keep"] == 0 and json.loads(out.stdout.splitlines()[-1])["shared"] == 115713
    bad = subprocess.run([sys.executable, "-m", "ccoverlap", "run", "--keep", "101", "--", "true"], env=clean_env(),
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "CCOVERLAP_KEEP=101 is out of range: valid 0..100" in bad.stderr
