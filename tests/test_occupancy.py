import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccoverlap import KernelFootprint, Resource, UsageError, occupancy, resident_blocks
from ccoverlap.model.limits import PRESETS
from ccoverlap.model.occupancy import coresident, pad_for_blocks
from cuda_rules import cuda_blocks

NVIDIA = [d for d in PRESETS.values() if d.vendor == "nvidia"]


def test_nccl_cta_on_h200_is_register_bound_at_one_block():
    # 640 threads x 96 regs: 3072 registers per warp, 5 warps per sub-partition,
    # so 20 warps per SM and one 20-warp CTA.
    occ = occupancy("h200", KernelFootprint(640, 96, 22592, 82240))
    assert occ.blocks == 1
    assert occ.limiting == (Resource.REGISTERS,)
    assert occ.regs_per_warp == 3072
    assert occ.smem_per_block == 22592 + 82240 + 1024  # already a multiple of 128


def test_sub_partitions_cost_a_warp_at_96_registers():
    # 21 warps of 96 regs fit the register file by count (21 * 3072 < 65536)
    # but not per sub-partition: 5 warps each, 20 in all.
    assert resident_blocks("h200", threads=32, regs=96) == 20


@pytest.mark.parametrize(
    ("threads", "regs", "static", "dynamic", "blocks", "limiting"),
    [
        (256, 16, 0, 0, 8, Resource.WARPS),
        (32, 16, 0, 0, 32, Resource.BLOCKS),
        (1024, 64, 0, 0, 1, Resource.REGISTERS),
        (1024, 65, 0, 0, 0, Resource.REGISTERS),  # 72 regs x 1024 threads > 64K per block
        (128, 32, 0, 116736 - 1024, 2, Resource.SHARED_MEMORY),  # 233472 / 116736 = 2
        (128, 32, 0, 116736 - 1023, 1, Resource.SHARED_MEMORY),  # one byte more rounds up a unit
    ],
)
def test_hand_checked_h200_cases(threads, regs, static, dynamic, blocks, limiting):
    occ = occupancy("h200", KernelFootprint(threads, regs, static, dynamic))
    assert occ.blocks == blocks
    assert limiting in occ.limiting


@settings(max_examples=400, deadline=None)
@given(
    dev=st.sampled_from(NVIDIA),
    threads=st.integers(1, 1024),
    regs=st.integers(1, 255),
    static=st.integers(0, 48 * 1024),
    frac=st.floats(0, 1),
)
def test_matches_independent_transcription_of_cuda_rules(dev, threads, regs, static, frac):
    dynamic = int(frac * (dev.smem_per_block_optin - static))
    got = resident_blocks(dev, threads=threads, regs=regs, static_smem=static, dynamic_smem=dynamic)
    assert got == cuda_blocks(dev, threads, regs, static, dynamic)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(threads=0, regs=32), "threads"),
        (dict(threads=1025, regs=32), "threads"),
        (dict(threads=128, regs=256), "regs"),
        (dict(threads=128, regs=0), "regs"),
        (dict(threads=128, regs=32, static_smem=-1), "static"),
        (dict(threads=128, regs=32, dynamic_smem=232449), "dynamic"),
        (dict(threads=128, regs=32, static_smem=1024, dynamic_smem=232448 - 1023), "dynamic"),
    ],
)
def test_out_of_range_input_names_field_and_range(kwargs, field):
    with pytest.raises(UsageError, match=rf"{field}=.*valid \d+\.\.\d+"):
        resident_blocks("h200", **kwargs)


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(UsageError, match="valid a40, a100, h100, h200, mi250x"):
        resident_blocks("h300", threads=128, regs=32)


def test_coresident_names_the_overflowing_resource():
    nccl = KernelFootprint(640, 96, 22592, 82240)
    compute = KernelFootprint(256, 32)
    assert coresident("h200", compute, 0, nccl, 1) == (True, None)
    # 5 NCCL warps x 3072 regs leave 1024 registers per sub-partition: one 32-reg warp
    # there, 4 in all, not the 8 warps of a 256-thread block
    assert coresident("h200", compute, 1, nccl, 1) == (False, Resource.REGISTERS)
    assert coresident("h200", KernelFootprint(256, 16), 1, nccl, 1) == (True, None)
    assert coresident("h200", KernelFootprint(256, 16), 2, nccl, 1)[1] == Resource.REGISTERS
    assert coresident("h200", KernelFootprint(32, 16), 31, KernelFootprint(32, 16), 2) == (False, Resource.BLOCKS)
    assert coresident("h200", KernelFootprint(1024, 16), 2, KernelFootprint(32, 16), 1) == (False, Resource.WARPS)
    big = KernelFootprint(128, 16, 0, 120000)
    assert coresident("h200", big, 1, big, 1) == (False, Resource.SHARED_MEMORY)


@settings(max_examples=200, deadline=None)
@given(
    threads=st.integers(1, 1024), regs=st.integers(16, 64), static=st.integers(0, 8192), blocks=st.integers(1, 32)
)
def test_pad_for_blocks_is_smallest(threads, regs, static, blocks):
    k = KernelFootprint(threads, regs, static)
    pad = pad_for_blocks("h200", k, blocks)
    if pad is None:
        return
    assert occupancy("h200", k.padded(pad)).blocks <= blocks
    if pad > 0:
        assert occupancy("h200", k.padded(pad - 1)).blocks > blocks
