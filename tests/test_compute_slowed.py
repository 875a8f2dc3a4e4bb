"""Compute slowed beside communication (`analysis/mechanisms/compute_slowed.py`, issue 27.3): the wave tail named
by the occupancy model with its cost replayed, and levers priced on both sides: never named where the net is not a
gain."""
from __future__ import annotations

import pytest

import kineto_synth as ks
from ccoverlap.analysis.mechanisms import compute_slowed
from ccoverlap.analysis.mechanisms.base import COMPUTE_SLOWED
from ccoverlap.analysis.recommend import verdict
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import PRESETS
from test_analysis_doctor import NCCL, one_rank

#: cuBLAS's bf16 GEMM on the H200 (NOTES): grid 132, 384 threads, 168 registers, ~200 KB of shared memory
GEMM = dict(block=384, grid=132, regs=168, smem=200_000)


def test_a_one_wave_grid_beside_comm_ctas_spills_a_wave_tail(tmp_path):
    """The collective's 24 CTAs hold 24 SMs when the GEMM starts: 108 of its 132 blocks start, 24 spill into a
    second wave; it ran 1.9x its time alone. Its cost is the replay without it: the step ends 0.9 ms sooner. No
    lever relieves it: fewer CTAs still hold SMs a full-wave block cannot share, smaller ones do not fit beside."""
    kernels = [ks.K(ks.NCCL, 100, 500, launch_ts=90, launch_dur=5, **NCCL),
               ks.K("nvjet_sm90_tst_gemm", 150, 1900, launch_ts=140, launch_dur=5, **GEMM)]
    _, d = one_rank(tmp_path, kernels, alone=[500, 1000])
    (s,) = d.compute_slowed
    assert s.cause == compute_slowed.WAVE_TAIL and s.spilled == 24
    v = verdict([d])
    assert v.by_mechanism_ms[COMPUTE_SLOWED + ":wave_tail"] == pytest.approx(0.9, abs=0.01)
    assert v.recommendations == ()
    assert "wave tail: nvjet_sm90_tst_gemm (grid 132, one full wave) spilled 24 block(s)" in v.line
    assert "nothing a lever can do" in v.line


def test_no_wave_tail_where_the_grid_is_not_one_full_wave(tmp_path):
    """Half a wave (66 blocks) fits beside the CTAs: its slowdown is not a wave tail, its cause unknown."""
    kernels = [ks.K(ks.NCCL, 100, 500, launch_ts=90, launch_dur=5, **NCCL),
               ks.K("nvjet_sm90_tst_gemm", 150, 1900, launch_ts=140, launch_dur=5, **(GEMM | {"grid": 66}))]
    _, d = one_rank(tmp_path, kernels, alone=[500, 1000])
    (s,) = d.compute_slowed
    assert s.cause == compute_slowed.UNKNOWN and s.spilled == 0


def test_a_lever_is_named_where_its_net_is_a_gain(tmp_path):
    """A short collective with slack behind it: fewer CTAs stretch it (20 us to 120 us) but it still ends
    before the compute does, so relieving the compute nets its whole slowdown."""
    kernels = [ks.K(ks.ELEMENTWISE, 100, 1500, block=128, grid=132, regs=32, launch_ts=90, launch_dur=5),
               ks.K(ks.NCCL, 120, 20, launch_ts=110, launch_dur=5, **NCCL)]
    _, d = one_rank(tmp_path, kernels, alone=[1000, 20])
    v = verdict([d])
    top = v.recommendations[0]
    assert top.lever == "nccl-ctas=4" and top.gain_ms == pytest.approx(0.5, abs=0.01)
    assert "with nccl-ctas=4 the collectives take 6.0x longer" in top.evidence


def test_capacity_is_the_occupancy_models():
    device = PRESETS["h200"]
    gemm = KernelFootprint(threads=384, regs=168, dynamic_smem=200_000, grid=132)
    comm = KernelFootprint(threads=544, regs=96, dynamic_smem=103808, grid=24)
    assert compute_slowed.capacity(device, gemm, []) == 132
    assert compute_slowed.capacity(device, gemm, [comm]) == 108


# --- what priority costs the compute beside the collective it starts (compute_slowed.landing) ---

FAT = KernelFootprint(threads=256, regs=16, dynamic_smem=100 * 1024, grid=132 * 2 * 20)  # 2 an SM, 20 waves
SMALL_COMM = KernelFootprint(threads=256, regs=16, dynamic_smem=8 * 1024, grid=16)  # its SM takes 100 KB alone


def _waiting(blocker_fp, comm_fp, *, ready, blocker_ts, blocker_dur, comm_dur, same_launch):
    """A rank with one collective that waited behind one grid (only what `landing` reads)."""
    from types import SimpleNamespace

    from ccoverlap.analysis.contention import CommWait
    from ccoverlap.analysis.mechanisms.base import Cause
    from ccoverlap.analysis.model import KernelClass, KernelEvent
    grid = KernelEvent("known_fat", KernelClass.COMPUTE, 7, blocker_ts, blocker_dur, 352, blocker_fp, None)
    comm = KernelEvent(ks.NCCL, KernelClass.COMMUNICATION, 13, ready + 2000, comm_dur, 352 if same_launch else 361,
                       comm_fp, None)
    c = CommWait(comm, "ProfilerStep#2", ready, "event", 2000, ("known_fat",), Cause.DISPATCH_ORDER, comm_dur, (),
                 index=5, blocker=grid, blocker_index=3)
    return SimpleNamespace(device=PRESETS["h200"], comm=(c,))


def test_priority_lands_a_collective_first_on_idle_sms_inside_one_graph_launch():
    """The collective and the 20-wave grid released at one moment by one graph launch: its 16 CTAs take idle SMs
    first, which take its 100 KB configuration; the grid's 100 KB blocks start there only after the collective's
    1 ms: 16 SMs x 2 slots x 1000 us over the grid's 264 slots = 121.2 us more (measured on the H200: the graph's
    grid ran 200 us longer, whole waves of 100 us)."""
    d = _waiting(FAT, SMALL_COMM, ready=1000, blocker_ts=1000.26, blocker_dur=2000, comm_dur=1000, same_launch=True)
    assert compute_slowed.landing(d, frozenset({5})) == {3: pytest.approx(2000 + 16 * 2 * 1000 / 264)}
    assert compute_slowed.landing(d, frozenset()) == {}  # a collective the lever does not start costs nothing


def test_priority_costs_nothing_where_the_collective_lands_beside_the_grids_blocks():
    """Plain launches: the grid, queued behind the producer on its stream, dispatched first; the collective's CTA
    joins an SM configured for the grid's two blocks and fits beside both (measured: 2011 us either way)."""
    d = _waiting(FAT, SMALL_COMM, ready=1000, blocker_ts=1001, blocker_dur=2000, comm_dur=1000, same_launch=False)
    assert compute_slowed.landing(d, frozenset({5})) == {}
    # in one graph launch too, where the grid was already dispatching when the collective became ready
    d = _waiting(FAT, SMALL_COMM, ready=1000, blocker_ts=900, blocker_dur=2000, comm_dur=1000, same_launch=True)
    assert compute_slowed.landing(d, frozenset({5})) == {}


def test_a_grid_of_one_block_an_sm_loses_the_sms_its_retiring_blocks_leave_to_the_collective():
    """200 KB blocks, one an SM: each retiring block empties its SM, the collective's CTA takes it at its own 100 KB
    configuration, and no 200 KB block starts there until it ends: 16 x 1 x 500 us over 132 slots."""
    big = KernelFootprint(threads=256, regs=16, dynamic_smem=200 * 1024, grid=132 * 4)
    d = _waiting(big, SMALL_COMM, ready=1000, blocker_ts=500, blocker_dur=3000, comm_dur=500, same_launch=False)
    assert compute_slowed.landing(d, frozenset({5})) == {3: pytest.approx(3000 + 16 * 500 / 132)}


def test_priority_is_named_at_its_net_where_its_ctas_take_room_from_the_grid(tmp_path):
    """A 3-wave grid of 1,024-thread blocks (two an SM by threads) and a 256-thread collective that waited for its
    threads: under priority the collective starts at 200 beside one block on each of its 16 SMs, which lose one of
    their two slots for its 500 us: the grid runs 16 x 1 x 500 / 264 = 30.3 us longer, so the step ends 500 - 30.3
    us sooner, not 500."""
    grid = ks.K("wide_kernel", 100, 3000, block=1024, grid=3 * 2 * 132, regs=16, launch_ts=90, launch_dur=5)
    comm = ks.K("ncclDevKernel_SendRecv", 3100, 500, stream=13, block=256, grid=16, regs=32, launch_ts=190,
                launch_dur=10)
    _, d = one_rank(tmp_path, [grid, comm])
    (c,) = d.comm
    assert c.cause.value == "threads" and c.blocker_index == 0
    v = verdict([d])
    assert d.headroom_ms == pytest.approx(0.5)
    assert v.recommendations[0].lever == "priority"
    assert v.recommendations[0].gain_ms == pytest.approx(0.5 - 16 * 500 / 264 / 1000, abs=1e-6)


def test_one_hardware_queue_is_named_at_its_net_where_the_collective_then_takes_a_one_wave_grids_sms(tmp_path):
    """The collective (24 NCCL CTAs) launched before a one-wave GEMM (one 200 KB block an SM) waited for its end
    (1,400 us): one hardware queue dispatches it first, and its CTAs then hold 24 SMs where no GEMM block fits beside
    them for its 1,000 us: 24 x 1 x 1000 / 132 = 181.8 us more GEMM, so the step ends 1000 - 181.8 us sooner, not
    1000 (NOTES: the known-answer wave_tail, 0.901 ms named before, 0.667 realized)."""
    comm = ks.K(ks.NCCL, 1500, 1000, launch_ts=80, launch_dur=4, **NCCL)
    gemm = ks.K("nvjet_sm90_tst_gemm", 100, 1400, launch_ts=88, launch_dur=4, **GEMM)
    _, d = one_rank(tmp_path, [comm, gemm])
    (c,) = d.comm
    assert c.cause.value == "shared_memory" and c.ready_us == 84
    assert compute_slowed.landing(d, frozenset({c.index}), first=True) == {c.blocker_index: pytest.approx(
        1400 + 24 * 1000 / 132)}
    top = verdict([d]).recommendations[0]
    assert top.lever == "max-connections" and top.gain_ms == pytest.approx(1.0 - 24 / 132, abs=1e-6)


def test_the_collectives_own_carveout_hint_keeps_room_on_the_idle_sms_it_lands_on():
    """With comm-carveout-hint (100) an idle SM takes the largest configuration for the collective's CTA, and the
    grid's two 100 KB blocks start beside it: priority then costs the graph's grid nothing (measured on the H200:
    2012 us with the hint, 2211 without)."""
    d = _waiting(FAT, SMALL_COMM, ready=1000, blocker_ts=1000.26, blocker_dur=2000, comm_dur=1000, same_launch=True)
    assert compute_slowed.landing(d, frozenset({5}), hint=100) == {}
    big = KernelFootprint(threads=256, regs=16, dynamic_smem=220 * 1024, grid=132 * 4)  # no room beside it by capacity
    d = _waiting(big, SMALL_COMM, ready=1000, blocker_ts=500, blocker_dur=3000, comm_dur=500, same_launch=False)
    assert compute_slowed.landing(d, frozenset({5}), hint=100) == {3: pytest.approx(3000 + 16 * 500 / 132)}


def test_a_combination_is_named_only_where_it_gains_beyond_the_lever_it_adds_to():
    from ccoverlap.analysis.recommend import Recommendation, _beyond_parts
    both, alone = Recommendation("priority+comm-carveout-hint", 0.9, ""), Recommendation("priority", 0.778, "")
    named = _beyond_parts([both, alone], floor_ms=0.015)
    assert [r.lever for r in named] == ["priority+comm-carveout-hint", "priority"]
    assert named[0].evidence.endswith("; priority alone: 0.778 ms") and named[1] == alone
    same = Recommendation("priority+comm-carveout-hint", 0.79, "")
    assert _beyond_parts([same, alone], floor_ms=0.015) == [alone]  # within the naming floor: the part alone


def test_priority_with_the_collectives_hint_is_named_first_where_its_ctas_would_take_the_grids_sms(tmp_path):
    """A 3-wave grid of one 120 KB block an SM; the 8 KB collective fits beside a block (the SM configured for the
    grid) but waits for the grid's dispatch. Under priority it takes SMs as their blocks retire, empty, at its own
    100 KB configuration, where no 120 KB block starts for its 500 us: 16 x 500 / 132 us of grid more. With its own
    hint at 100 the SMs keep room: the whole 500 us, and that is what levers reach."""
    grid = ks.K("big_kernel", 100, 3000, block=256, grid=3 * 132, regs=16, smem=120 * 1024, launch_ts=90)
    comm = ks.K("ncclDevKernel_SendRecv", 3100, 500, stream=13, block=256, grid=16, regs=16, smem=8192,
                launch_ts=190, launch_dur=10)
    _, d = one_rank(tmp_path, [grid, comm])
    assert d.comm[0].cause.value == "dispatch_order"
    v = verdict([d])
    assert [(r.lever, round(r.gain_ms, 6)) for r in v.recommendations] == [
        ("priority+comm-carveout-hint", 0.5), ("priority", round(0.5 - 16 * 500 / 132 / 1000, 6))]
    assert v.lever_headroom_ms == pytest.approx(0.5)


#: a reduction grid (an fp8 amax: 528 blocks of 512 threads, one wave on the H200's SMs at 4 an SM)
REDUCE = dict(block=512, grid=528, regs=32, smem=2064)


def _released(tmp_path, *, start, dur):
    """A 200 us collective at 100 us and a reduction starting at `start`, 40 us alone, `dur` measured."""
    kernels = [ks.K(ks.NCCL, 100, 200, launch_ts=90, launch_dur=5, **NCCL),
               ks.K("void at::native::reduce_kernel<512, 1>", start, dur, launch_ts=start - 10, launch_dur=5,
                    **REDUCE)]
    return one_rank(tmp_path, kernels, alone=[200, 40])[1]


def test_a_grid_far_slower_beside_a_collective_released_with_it_names_one_hardware_queue(tmp_path):
    """The reduction started 5 us after the collective and ran 10x its time alone: more than sharing explains, read
    as released with the collective. One hardware queue is priced at the replay with it at its time alone: it ends
    at 145 us, the collective at 300, the step 205 us sooner. Fewer NCCL CTAs relieve nothing of it."""
    d = _released(tmp_path, start=105, dur=400)
    (s,) = d.compute_slowed
    assert s.cause == compute_slowed.CO_RELEASED
    v = verdict([d])
    top = v.recommendations[0]
    assert top.lever == "max-connections" and top.gain_ms == pytest.approx(0.205, abs=0.005)
    assert "10.0x its time alone beside a collective released with a compute grid" in top.evidence
    assert not any(r.lever.startswith(("nccl-ctas", "nccl-threads")) for r in v.recommendations)


@pytest.mark.parametrize("start, dur", [(160, 400), (105, 100)], ids=["released-apart", "2.5x-alone"])
def test_no_co_release_apart_from_the_collective_or_within_what_sharing_explains(tmp_path, start, dur):
    """Started 60 us after the collective (nothing released with it), or 2.5x its time alone (within what a second
    wave or a shared memory system explains): its cause is not read as co-release, and one queue is not priced."""
    d = _released(tmp_path, start=start, dur=dur)
    (s,) = d.compute_slowed
    assert s.cause != compute_slowed.CO_RELEASED
    assert compute_slowed.one_queue(d) is None
