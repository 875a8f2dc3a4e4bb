"""The shared-memory carveout: the rule on hand-computed cases, the plan's carveout-hint, the sweep's
plumbing on a fake driver, and the recorded H200 table re-checked row by row."""
import json
import struct
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from ccoverlap import KernelFootprint, UsageError, plan
from ccoverlap.gpu import cuda_driver as cu
from ccoverlap.lab import carveout_sweep as sweep
from ccoverlap.cli import main
from ccoverlap.model import occupancy as occupancy_module
from ccoverlap.model.limits import PRESETS, read_live
from ccoverlap.model.occupancy import CARVEOUT, beside, carveout_hint, fits_beside, full_occupancy_config, hinted_config
from test_limits import FakeDriver

KB = 1024
H200 = PRESETS["h200"]
RESIDENT_8K = KernelFootprint(128, 8, 0, 8 * KB, grid=132)  # 132 x 128 threads, 8 registers: one block per SM
SLOW_HOST = sweep.Settings(reps=3, spin_us=200_000)  # a loaded CI host must not look late to the fake GPU
TABLES = sorted((Path(__file__).parents[1] / "bench" / "results").glob(
    "carveout-[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]-h200.json"))


def comm(kb: int, threads: int = 256) -> KernelFootprint:
    return KernelFootprint(threads, 8, 0, kb * KB, grid=16)


# --- device limits ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [n for n, d in PRESETS.items() if d.vendor == "nvidia"])
def test_nvidia_presets_list_ascending_configurations_up_to_their_shared_memory(name):
    configs = PRESETS[name].smem_configs_kb
    assert list(configs) == sorted(set(configs)) and configs[0] == 0
    assert configs[-1] * KB == PRESETS[name].smem_per_sm


def test_configurations_per_compute_capability():
    assert PRESETS["a40"].smem_configs_kb == (0, 8, 16, 32, 64, 100)
    assert PRESETS["a100"].smem_configs_kb == (0, 8, 16, 32, 64, 100, 132, 164)
    assert H200.smem_configs_kb == PRESETS["h100"].smem_configs_kb == (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)
    assert PRESETS["mi250x"].smem_configs_kb == ()  # not modelled


def test_a_live_gpu_takes_the_configurations_of_its_compute_capability():
    assert read_live(1, drv=FakeDriver(major=8)).smem_configs_kb == PRESETS["a100"].smem_configs_kb  # cc 8.0
    assert read_live(1, drv=FakeDriver(major=10)).smem_configs_kb == ()  # no preset of cc 10.0: capacity only


# --- the rule -----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("kb", "starts", "needs_kb"),
    [
        (8, True, 100),  # 8 blocks (warps) x 9 KB = 72 -> 100 KB <= 164
        (24, False, 228),  # 8 x 25 = 200 -> 228 > 164
        (48, False, 196),  # 4 x 49 = 196
        (64, False, 196),  # 3 x 65 = 195 -> 196
        (104, False, 228),  # 2 x 105 = 210 -> 228
        (120, True, 132),  # 1 x 121 -> 132 <= 164, and 121 fits in 164 - 9
        (160, False, 164),  # 164 <= 164, but 161 > 164 - 9 left
    ],
)
def test_worked_check_beside_an_8_kb_resident(kb, starts, needs_kb):
    # the resident: 16 blocks/SM (warps) x 9 KB = 144 KB -> the 164 KB configuration
    b = beside("h200", RESIDENT_8K, comm(kb))
    assert (b.fits, b.config, b.comm_needs, b.resident_blocks) == (starts, 164 * KB, needs_kb * KB, 1)
    assert b.blocking == (None if starts else CARVEOUT)  # by capacity (228 KB) every one of them fits


@pytest.mark.parametrize(
    ("resident_kb", "hint", "config_kb", "starting"),
    [
        (0, None, 64, ()),  # 16 blocks of 1 KB (the reserve), each counted at 2.5 KB: 40 KB -> 64
        (1, None, 64, ()),  # 16 x 2 KB, counted at 2.5 KB each -> 64
        (32, None, 228, (8, 24, 48, 64, 104, 120, 160)),  # 6 x 33 = 198: all that fit by capacity
        (0, 0, 64, ()),  # a kernel without shared memory takes hint 0 as no hint
        (1, 0, 8, ()),  # 0 KB asked for; one 2 KB block -> 8 KB
        (1, 25, 132, (8, 120)),  # at most the 1 KB reserve: twice the hint, 50% = 114 KB -> 132
        (1, 50, 228, (8, 24, 48, 64, 104, 120, 160)),  # twice 50%: all that fit by capacity
        (0, 25, 64, ()),  # 57 KB -> 64
        (0, 50, 132, (8, 120)),  # 114 KB -> 132
        (0, 75, 196, (8, 48, 64, 120, 160)),  # 171 KB -> 196
        (0, 100, 228, (8, 24, 48, 64, 104, 120, 160)),
        (100, 0, 132, (8,)),  # one 101 KB block needs 132 KB whatever the hint; 31 KB left
    ],
)
def test_the_resident_configuration_and_who_starts_beside_it(resident_kb, hint, config_kb, starting):
    resident = KernelFootprint(128, 8, 0, resident_kb * KB, grid=132)
    assert hinted_config(H200, resident, hint) == config_kb * KB
    fits = [kb for kb in (8, 24, 48, 64, 104, 120, 160) if fits_beside("h200", resident, comm(kb), resident_hint=hint)]
    assert tuple(fits) == starting


def test_the_unhinted_configuration_counts_each_block_at_2_5_kb_and_a_newcomers_need_does_not():
    assert hinted_config(H200, KernelFootprint(1024, 8, grid=132), None) == 8 * KB  # 2 blocks x 2.5 KB
    assert hinted_config(H200, KernelFootprint(256, 8, grid=132), None) == 32 * KB  # 8 x 2.5 = 20 KB
    assert hinted_config(H200, KernelFootprint(64, 8, grid=132), None) == 100 * KB  # 32 x 2.5 = 80 KB
    assert hinted_config(H200, KernelFootprint(256, 8, 0, 8 * KB, grid=132), None) == 100 * KB  # 8 x 9 KB as they are
    assert full_occupancy_config(H200, KernelFootprint(256, 8)) == 8 * KB  # 8 x 1 KB: comm kernels of 0 B need no more


@pytest.mark.parametrize(
    ("static", "dynamic", "hint", "config_kb"),
    [
        (0, 1 * KB, 25, 132),  # measured: twice 25% = 114 KB -> 132
        (1 * KB, 0, 25, 132),  # static shared memory counts the same (not measured)
        (0, 512, 50, 228),  # below the reserve: doubled too (a prediction)
        (0, 1 * KB + 128, 25, 64),  # above the reserve: the plain hint, 57 KB -> 64
        (0, 2 * KB, 75, 196),
        (0, 1 * KB, 0, 8),  # twice 0 is 0: one block's configuration
        (0, 0, 0, 64),  # no shared memory: hint 0 is no hint (16 blocks x 2.5 KB -> 64)
        (0, 0, 1, 8),  # 2 KB asked for: one 1 KB block -> 8
    ],
)
def test_the_hints_exceptions_follow_the_kernels_own_shared_memory(static, dynamic, hint, config_kb):
    assert hinted_config(H200, KernelFootprint(128, 8, static, dynamic, grid=132), hint) == config_kb * KB


@pytest.mark.parametrize(
    ("resident", "newcomer", "blocking"),
    [
        (KernelFootprint(256, 32, grid=132), KernelFootprint(640, 96, 22592, 82240), "registers"),
        (KernelFootprint(1024, 8, grid=264), KernelFootprint(256, 8), "warps"),  # 2 x 32 warps: the SM is full
        (KernelFootprint(32, 8, grid=132 * 32), KernelFootprint(256, 8), "blocks"),
        (KernelFootprint(128, 8, 0, 100 * KB, grid=132), comm(160), "shared_memory"),  # 101 + 161 > 228
        (RESIDENT_8K, comm(24), CARVEOUT),
    ],
)
def test_the_blocking_resource_is_named(resident, newcomer, blocking):
    b = beside("h200", resident, newcomer)
    assert not b.fits and b.blocking == blocking


def test_amd_is_capacity_only_and_says_so():
    b = beside("mi250x", KernelFootprint(128, 8, grid=110), comm(8))
    assert b.fits and b.config is None and b.comm_needs is None and "not modelled" in b.explain()
    assert beside("mi250x", KernelFootprint(128, 8, 0, 32 * KB, grid=110), comm(48)).blocking == "shared_memory"
    assert carveout_hint("mi250x", KernelFootprint(128, 8, grid=110), comm(8)) is None


def test_an_idle_sm_takes_the_newcomers_configuration():
    assert beside("h200", RESIDENT_8K, comm(24), resident_per_sm=0).fits


def test_the_comm_hint_and_the_attributes_are_checked_not_modelled():
    base = beside("h200", RESIDENT_8K, comm(24))
    assert beside("h200", RESIDENT_8K, comm(24), comm_hint=100, resident_max_dynamic_smem=200 * KB,
                  comm_max_dynamic_smem=200 * KB) == base
    with pytest.raises(UsageError, match="resident max dynamic shared memory=4096 is out of range"):
        beside("h200", RESIDENT_8K, comm(24), resident_max_dynamic_smem=4096)
    with pytest.raises(UsageError, match=r"resident hint=101 is out of range: valid 0..100 percent"):
        beside("h200", RESIDENT_8K, comm(24), resident_hint=101)
    with pytest.raises(UsageError, match="cannot run on h200"):
        beside("h200", KernelFootprint(1024, 255), comm(8))


@pytest.mark.parametrize(
    ("resident", "newcomer", "hint"),
    [
        (KernelFootprint(128, 8, grid=132), comm(8), 43),  # 100 KB needed; 43% = 98 KB rounds up to it, 44% to 132
        (RESIDENT_8K, comm(24), 100),  # 228 KB needed
        (KernelFootprint(128, 8, 0, 100 * KB, grid=132), comm(160), None),  # no configuration holds both
    ],
)
def test_carveout_hint_is_the_largest_hint_of_the_smallest_configuration_that_works(resident, newcomer, hint):
    assert carveout_hint("h200", resident, newcomer) == hint
    if hint is not None:
        assert fits_beside("h200", resident, newcomer, resident_hint=hint)
        assert hinted_config(H200, resident, hint + 1 if hint < 100 else hint) >= hinted_config(H200, resident, hint)


# --- the planner names the hint -----------------------------------------------------------------

def test_plan_names_carveout_hint_when_only_the_configuration_blocks():
    # 10 blocks of 192 threads leave 4 warps; their 10 KB, counted at 2.5 KB a block, keep the SM at
    # 32 KB, and 16 comm blocks of 9 KB need 144 -> 164 KB: the largest hint that rounds up to 164 KB is 71%.
    p = plan("h200", KernelFootprint(192, 16), KernelFootprint(128, 16, 0, 8 * KB, grid=16))
    assert p.feasible and p.pad_bytes == 0 and p.carveout.blocking == CARVEOUT and p.carveout_hint == 71
    assert "fit by capacity" in p.explain() and "Fix: carveout-hint 71" in p.explain()
    assert p.to_dict()["carveout"]["config"] == 32 * KB


def test_the_nccl_pad_needs_the_hint_too():
    # one padded block (116,864 B) keeps the SM at 132 KB: no room for the 105,856 B CTA until 228 KB
    p = plan("h200", KernelFootprint(256, 16), KernelFootprint(640, 96, 22592, 82240, grid=16, cluster=4))
    assert p.pad_bytes == 115713 and p.compute_blocks_after == 1 and p.carveout_hint == 100
    assert (p.carveout.config, p.carveout.comm_needs, p.carveout.together) == (132 * KB, 132 * KB, 116864 + 105856)
    assert ("configured with 132 KB of shared memory for compute: the compute blocks and the comm CTA take 218 KB "
            "together, more than that") in p.explain()  # enough for the CTA alone: the two together are not


def test_plans_without_a_carveout_problem_are_unchanged():
    light = KernelFootprint(128, 32, 0, 4096, grid=8)
    p = plan("h200", KernelFootprint(128, 32, 0, 40000), light)  # 5 x 40 KB -> 228 KB configuration
    assert p.feasible and p.carveout.fits and p.carveout_hint is None and "carveout" not in p.explain()
    assert plan("mi250x", KernelFootprint(256, 16), comm(8)).carveout_hint is None
    infeasible = plan("h200", KernelFootprint(256, 32), KernelFootprint(640, 96, 22592, 82240, grid=16))
    assert not infeasible.feasible and infeasible.carveout is None


def test_plan_cli_prints_the_fix(capsys):
    code = main(["plan", "--device", "h200", "--compute", "threads=192,regs=16",
                 "--comm", "threads=128,regs=16,dynamic=8K,ctas=16"])
    assert code == 0 and "Fix: carveout-hint 71" in capsys.readouterr().out


# --- the sweep ----------------------------------------------------------------------------------

def test_the_sweep_crosses_the_main_axes_and_varies_the_others_over_them():
    cases = sweep.cases()
    assert len(cases) == len(set(cases)) and len(cases) * 3 * 2.5e-3 < 180  # one device call
    main_cross = [c for c in cases if c.comm_hint is None and c.primer == "min" and c.resident_per_sm == 1
                  and c.resident_attr == sweep.launch_attr(c.resident_smem)
                  and c.comm_attr == sweep.launch_attr(c.comm_smem)]
    assert len(main_cross) == 7 * 6 * 3 * 8 * 2
    assert {c.resident_attr for c in cases} == {None, sweep.RAISED} and {c.comm_hint for c in cases} == {None, 100}
    assert {c.primer for c in cases} == {"min", "max"} and {c.resident_per_sm for c in cases} == {1, 2}
    for c in cases:  # every launch is valid: past 48 KB the attribute is raised
        for smem, attr in ((c.resident_smem, c.resident_attr), (c.comm_smem, c.comm_attr)):
            assert smem <= cu.DEFAULT_SMEM_PER_BLOCK or (attr is not None and attr >= smem)
    quick = sweep.cases(quick=True)
    assert len(quick) == 14 and sweep.Case(8 * KB, None, None, 128, 120 * KB, 256, None, sweep.RAISED) in quick


def test_each_hint_and_attribute_has_its_own_kernel():
    c = sweep.Case(8 * KB, None, 50, 128, 120 * KB, 256, None, sweep.RAISED)
    assert (c.kernel("resident") == "carve_resident_h50_anone"
            and c.kernel("comm") == f"carve_comm_hnone_a{sweep.RAISED}")
    assert c.kernel("primer") == "carve_primer_h0_anone"
    names = {c.kernel(role) for c in sweep.cases() for role in ("resident", "comm", "primer")}
    assert len(names) == 12 + 4 + 2


def _stamps(*blocks):
    return [(start, end, sm) for start, end, sm in blocks]


def test_classify_starts_waits_and_the_margin():
    resident = _stamps((1000, 2_001_000, 0), (1500, 2_001_500, 1))
    rep = sweep.classify(resident, _stamps((130_000, 150_000, 2)), margin_ns=500_000)
    assert rep.starts and rep.delay_us == 129.0 and rep.resident_sms == 2 and rep.spread_us == 0.5
    assert not sweep.classify(resident, _stamps((2_001_100, 2_021_100, 0)), 500_000).starts
    assert not sweep.classify(resident, _stamps((1_600_000, 1_620_000, 0)), 500_000).starts  # inside the margin
    with pytest.raises(RuntimeError, match="did not stamp"):
        sweep.classify(resident, _stamps((0, 0, 0)), 500_000)


class FakeGPU(FakeDriver):
    """cuda_driver.Driver's calls the sweep makes, on no GPU: a comm block starts beside the resident
    when `decide` says so, given both launches and the attributes set on their kernels."""

    BASE = 1 << 20

    def __init__(self, decide):
        super().__init__()
        self.decide, self.set_attrs, self.launches, self.names = decide, {}, [], {}
        self.mem = bytearray()

    def use_primary_context(self, dev):
        assert dev == 101

    def load_kernels(self, image, names):
        assert all(f"SPIN_KERNEL({n})".encode() in image for n in names)
        self.names = {1000 + i: n for i, n in enumerate(names)}
        return {n: h for h, n in self.names.items()}

    def set_kernel_attribute(self, attr, handle, value, dev):
        self.set_attrs[handle, attr] = value

    def kernel_attribute(self, attr, handle, dev):
        defaults = {cu.FUNC_NUM_REGS: 8, cu.FUNC_SHARED_SIZE_BYTES: 0, cu.FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT: -1,
                    cu.FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES: cu.DEFAULT_SMEM_PER_BLOCK}
        return self.set_attrs.get((handle, attr), defaults[attr])

    def create_stream(self, priority):
        self.streams = getattr(self, "streams", 6) + 1
        return self.streams

    def alloc(self, nbytes):
        self.mem = bytearray(nbytes)
        return self.BASE

    def free(self, ptr):
        assert ptr == self.BASE

    def zero(self, ptr, nbytes):
        self.mem[ptr - self.BASE:ptr - self.BASE + nbytes] = bytes(nbytes)

    def synchronize(self):
        pass

    def copy_to_host(self, ptr, nbytes):
        return bytes(self.mem[ptr - self.BASE:ptr - self.BASE + nbytes])

    def launch(self, kernel, grid, block, shared_mem, stream, args, cluster=1):
        name, spin = self.names[kernel], args[1].value
        self.launches.append((name, grid, block, shared_mem, stream))
        if name.startswith("carve_comm"):
            resident = next(x for x in reversed(self.launches) if x[0].startswith("carve_resident"))
            hint = self.set_attrs.get((self.kernels[resident[0]], cu.FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT))
            t0 = 150_000 if self.decide(resident, self.launches[-1], hint) else 1000 + self.resident_spin + 1000
        else:
            t0 = 1000
            self.resident_spin = spin
        stamps = [v for b in range(grid) for v in (t0 + b, t0 + b + spin, b % 132)]
        at = args[0].value - self.BASE
        self.mem[at:at + 24 * grid] = struct.pack(f"<{3 * grid}Q", *stamps)

    @property
    def kernels(self):
        return {n: h for h, n in self.names.items()}


def _model(resident, comm_launch, hint):
    """The fake hardware follows the model, from what was launched and set, not from the case."""
    r = KernelFootprint(resident[2], 8, 0, resident[3], grid=resident[1])
    return fits_beside(H200, r, KernelFootprint(comm_launch[2], 8, 0, comm_launch[3], grid=16), resident_hint=hint)


def test_sweep_on_a_fake_gpu_measures_what_the_cases_ask():
    gpu = FakeGPU(_model)
    cases = sweep.cases(quick=True)
    dev, rows = sweep.sweep(cases, SLOW_HOST, ordinal=1, drv=gpu, compile=lambda src, arch: src.encode())
    assert dev.name == "NVIDIA H200" and len(rows) == 14
    assert all(r.agree and r.consistent for r in rows), sweep.summary(dev, rows)
    assert {r.outcome for r in rows} == {"starts", "waits"}
    hint_of = {n: gpu.set_attrs.get((h, cu.FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT)) for h, n in gpu.names.items()}
    assert hint_of["carve_resident_h50_anone"] == 50 and hint_of["carve_resident_hnone_anone"] is None
    assert hint_of["carve_primer_h0_anone"] == 0
    assert (gpu.set_attrs[gpu.kernels[f"carve_comm_hnone_a{sweep.RAISED}"], cu.FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES]
            == sweep.RAISED)
    timed = gpu.launches[len(gpu.names):]  # after one warm-up launch per kernel
    assert len(timed) == 3 * 14 * 3  # primer, resident, comm per repetition
    for primer, resident, comm_launch in zip(timed[::3], timed[1::3], timed[2::3]):
        assert primer[0].startswith("carve_primer") and primer[1] == 132
        assert resident[1] == 132 and comm_launch[1] == 16 and resident[4] != comm_launch[4]
    prevs = [p for r in rows for p in r.prev]  # the measurement order: every case thrice, one first of all
    assert prevs.count(None) == 1 and len(prevs) == 42 and all(prevs.count(i) <= 3 for i in range(14))


def test_inconsistent_and_disagreeing_rows_are_reported():
    flips = iter(range(10**6))
    dev, rows = sweep.sweep(sweep.cases(quick=True), SLOW_HOST, ordinal=1,
                            drv=FakeGPU(lambda *_: next(flips) % 2 == 0), compile=lambda src, arch: src.encode())
    assert not all(r.consistent for r in rows)
    text = "\n".join(sweep.summary(dev, rows))
    assert "inconsistent" in text or "disagrees" in text
    dev, rows = sweep.sweep(sweep.cases(quick=True), replace(SLOW_HOST, reps=1), ordinal=1,
                            drv=FakeGPU(lambda *_: False), compile=lambda src, arch: src.encode())
    wrong = [r for r in rows if not r.agree]
    assert wrong and all(r.model.fits and r.outcome == "waits" for r in wrong)
    out = sweep.report(dev, rows, {"gpu": "fake"}, replace(SLOW_HOST, reps=1))
    assert out["rows_total"] == 14 and out["rows_agree"] == 14 - len(wrong) and out["settings"]["comm_grid"] == 16
    kernels = out["kernels"]  # what the driver reads back, per kernel
    assert (kernels["carve_resident_h50_anone"]["carveout"] == 50
            and kernels["carve_resident_hnone_anone"]["carveout"] == -1)
    assert kernels[f"carve_comm_hnone_a{sweep.RAISED}"]["max_dynamic_smem"] == sweep.RAISED


def test_a_comm_launch_that_leaves_the_host_late_is_run_again_then_refused():
    gpu = FakeGPU(_model)
    late = sweep.Settings(reps=1, spin_us=600, gap_us=100)  # the comm must leave within (600 - 500) / 2 us
    with pytest.raises(RuntimeError, match="left the host late 5 times"):
        sweep.sweep(sweep.cases(quick=True)[:1], late, ordinal=1, drv=gpu, compile=lambda src, arch: src.encode())
    assert len(gpu.launches) == len(gpu.names) + 3 * sweep.MAX_ATTEMPTS


def test_a_table_row_predicts_again_from_what_it_records():
    dev, rows = sweep.sweep(sweep.cases(quick=True), replace(SLOW_HOST, reps=1), ordinal=1,
                            drv=FakeGPU(_model), compile=lambda src, arch: src.encode())
    out = json.loads(json.dumps(sweep.report(dev, rows, {}, replace(SLOW_HOST, reps=1))))
    for values, row in zip(out["rows"], rows):
        case, resident, comm_kernel = sweep.unflat(dict(zip(out["columns"], values)))
        assert case == row.case and sweep.predict(H200, case, resident, comm_kernel) == row.model


# --- the recorded table -------------------------------------------------------------------------

# Where the model is conservative (docs/occupancy.md, "Against the H200 table"): resident footprints
# whose SMs measured a larger configuration than the model gives them, so comm kernels that the model
# keeps waiting started. Rows measured "starts" where the model says "waits", per class.
CONSERVATIVE = {
    "8 KB resident of 256 threads, no hint": 6,  # measured 132 KB, modelled 8 x 9 = 72 -> 100
}


def conservative_class(row: dict) -> str | None:
    """The CONSERVATIVE class of a table row's resident footprint, None outside them all."""
    kb, hint, threads = row["resident_smem"] // KB, row["resident_hint"], row["resident_threads"]
    if kb == 8 and hint is None and threads == 256:
        return "8 KB resident of 256 threads, no hint"
    return None


@pytest.mark.skipif(not TABLES, reason="no carveout table yet: run bench/device/carveout.sh on an H200 and commit "
                    "bench/results/carveout-<date>-h200.json")
@pytest.mark.parametrize("table", TABLES, ids=lambda p: p.name)
def test_every_recorded_case_matches_the_model(table):
    """The model never promises room that is not there, and errs only in the documented classes, by
    exactly the documented counts: any change in agreement, either way, fails here."""
    data = json.loads(table.read_text())
    assert "H200" in data["provenance"]["gpu"] and data["provenance"]["commit"] and not data["provenance"]["quick"]
    for field in ("smem_per_sm", "smem_per_block_optin", "smem_reserved_per_block", "sm_count", "max_threads_per_sm"):
        assert data["device_limits"][field] == getattr(H200, field), field
    rows = [dict(zip(data["columns"], r)) for r in data["rows"]]
    assert len(rows) == len(sweep.cases())
    spin = data["settings"]["spin_us"]
    unmeasured = [r for r in rows if r["resident_sms"] != H200.sm_count or r["spread_us"] > spin / 4]
    assert not unmeasured, unmeasured[:5]  # every resident held every SM at once
    assert all(r["consistent"] for r in rows), [r for r in rows if not r["consistent"]][:5]
    wrong = [r for r in rows if ("starts" if sweep.predict(H200, *sweep.unflat(r)).fits else "waits") != r["outcome"]]
    promised = [r for r in wrong if r["outcome"] == "waits"]
    assert not promised, promised[:5]  # the model says "starts": it started
    assert Counter(map(conservative_class, wrong)) == CONSERVATIVE, [r for r in wrong if not conservative_class(r)][:5]


@pytest.mark.gpu
def test_quick_sweep_on_this_gpu_agrees_with_the_model():
    dev, rows = sweep.sweep(sweep.cases(quick=True))
    assert all(r.agree and r.consistent for r in rows), sweep.summary(dev, rows)


@pytest.mark.skipif(not TABLES, reason="no carveout table yet")
def test_the_table_bounds_the_per_block_minimum_to_2_to_4_kb(monkeypatch):
    """docs/occupancy.md, "Against the H200 table": any minimum in (2, 4] KB gives the same answers on
    every row; at 2 KB the 256-thread residents of 0 and 1 KB miss, past 4 KB the 128-thread ones."""
    data = json.loads(TABLES[0].read_text())
    # the rest keep no minimum
    rows = [row for r in data["rows"] if (row := dict(zip(data["columns"], r)))["resident_hint"] in (None, 0)]

    def wrong_at(minimum: int) -> int:
        monkeypatch.setattr(occupancy_module, "CONFIG_MIN_PER_BLOCK", minimum)
        return sum(sweep.predict(H200, *sweep.unflat(r)).fits != (r["outcome"] == "starts") for r in rows)

    left = sum(CONSERVATIVE.values())
    assert wrong_at(2 * KB + 128) == wrong_at(4 * KB) == left
    assert wrong_at(2 * KB) == left + 12
    assert wrong_at(4 * KB + 128) > left
