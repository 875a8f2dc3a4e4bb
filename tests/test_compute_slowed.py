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
