import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccoverlap import KernelFootprint, Resource, occupancy, plan
from ccoverlap.model.occupancy import coresident, pad_for_blocks

NCCL = KernelFootprint(640, 96, 22592, 82240, grid=16, cluster=4, name="nccl")


def test_real_nccl_cta_fits_beside_one_16_register_block():
    p = plan("h200", KernelFootprint(256, 16), NCCL)
    assert p.feasible and p.compute_blocks_before == 8 and p.compute_blocks_after == 1
    # one block must take more than half the SM's shared memory: > 116736 B allocated
    assert p.pad_bytes + 1024 > 233472 // 2 - 128
    assert "pad each compute block with" in p.explain()


def test_real_nccl_cta_cannot_sit_beside_32_register_compute():
    p = plan("h200", KernelFootprint(256, 32), NCCL)
    assert not p.feasible
    assert p.binding == Resource.REGISTERS
    assert any("partition SMs: give communication 16 SM(s)" in s for s in p.suggestions)
    assert any(s.startswith("shrink comm CTAs to") for s in p.suggestions)
    assert "registers is the binding resource" in p.explain()


def test_shrunk_nccl_cta_gets_nccl_nthreads_hint():
    compute = KernelFootprint(512, 32)  # 4 warps of 1024 registers per sub-partition
    p = plan("h200", compute, NCCL)
    assert not p.feasible
    hint = [s for s in p.suggestions if "NCCL_NTHREADS=" in s]
    assert hint, p.suggestions
    threads = int(hint[0].split("to ")[1].split(" threads")[0])
    assert threads == 512 and "NCCL_NTHREADS=480" in hint[0]  # 4 NCCL warps of 3072 per sub-partition
    assert plan("h200", compute, KernelFootprint(threads, 96, 22592, 82240)).feasible


def test_no_pad_when_comm_already_fits():
    light = KernelFootprint(128, 32, 0, 4096, grid=8)
    p = plan("h200", KernelFootprint(128, 32, 0, 40000), light)  # 5 blocks/SM by shared memory
    assert p.feasible and p.pad_bytes == 0 and p.compute_blocks_after == p.compute_blocks_before


def test_comm_too_big_for_per_sm_request():
    p = plan("h200", KernelFootprint(128, 32), NCCL, per_sm=2)
    assert not p.feasible and p.comm_blocks_alone == 1
    assert any("--per-sm 1" in s for s in p.suggestions)


def _smaller_pads(compute, pad, before, after):
    """Pads below `pad` worth checking: 0, pad-1 and the smallest pad for each larger block count."""
    pads = {0, max(pad - 1, 0)}
    for n in range(after + 1, before + 1):
        p = pad_for_blocks("h200", compute, n)
        if p is not None and p < pad:
            pads.add(p)
    return sorted(p for p in pads if p < pad)


footprints = st.builds(
    KernelFootprint,
    threads=st.integers(1, 1024),
    regs=st.integers(16, 128),
    static_smem=st.integers(0, 16384),
    dynamic_smem=st.integers(0, 32768),
)


@settings(max_examples=300, deadline=None)
@given(compute=footprints, comm=footprints, per_sm=st.integers(1, 3))
def test_plan_properties(compute, comm, per_sm):
    p = plan("h200", compute, comm, per_sm)
    if p.feasible:
        padded = compute.padded(p.pad_bytes)
        after = occupancy("h200", padded).blocks
        assert after == p.compute_blocks_after >= 1
        assert coresident("h200", padded, after, comm, per_sm) == (True, None)
        for q in _smaller_pads(compute, p.pad_bytes, p.compute_blocks_before, after):
            smaller = compute.padded(q)
            assert not coresident("h200", smaller, occupancy("h200", smaller).blocks, comm, per_sm)[0]
    else:
        assert p.binding is not None and p.suggestions
        optin_room = 232448 - compute.smem
        for n in range(1, p.compute_blocks_before + 1):
            q = pad_for_blocks("h200", compute, n)
            if q is None or q > optin_room:
                continue
            smaller = compute.padded(q)
            assert not coresident("h200", smaller, occupancy("h200", smaller).blocks, comm, per_sm)[0]


def test_plan_rejects_bad_per_sm():
    with pytest.raises(ValueError, match="per_sm=0"):
        plan("h200", KernelFootprint(128, 32), NCCL, per_sm=0)


def test_drain_one_keeps_two_fma_blocks_beside_the_nccl_cta():
    # The measured sweet spot (NOTES.md): pad to 2 blocks/SM; the CTA enters when one retires.
    fma = KernelFootprint(256, 16, grid=132 * 8 * 6)
    p = plan("h200", fma, NCCL, drain=1)
    assert p.feasible and p.compute_blocks_after == 2 and p.drain == 1
    assert coresident("h200", fma.padded(p.pad_bytes), 1, NCCL, 1) == (True, None)
    assert occupancy("h200", fma.padded(p.pad_bytes - 1)).blocks == 3  # smallest pad for 2 blocks
    assert "once 1 compute block(s) on an SM retire" in p.explain()


def test_auto_drain_needs_waves():
    many = KernelFootprint(256, 16, grid=132 * 8 * 6)
    one_wave = KernelFootprint(256, 16, grid=132)
    assert plan("h200", many, NCCL, drain=None).drain == 1
    assert plan("h200", one_wave, NCCL, drain=None).drain == 0


@settings(max_examples=150, deadline=None)
@given(compute=footprints, comm=footprints, drain=st.integers(0, 3))
def test_more_drain_never_needs_a_larger_pad(compute, comm, drain):
    strict, relaxed = plan("h200", compute, comm, drain=drain), plan("h200", compute, comm, drain=drain + 1)
    if strict.feasible:
        assert relaxed.feasible and relaxed.pad_bytes <= strict.pad_bytes
    if relaxed.feasible:
        padded = compute.padded(relaxed.pad_bytes)
        staying = max(occupancy("h200", padded).blocks - relaxed.drain, 0)
        assert coresident("h200", padded, staying, comm, 1)[0]


def test_shrink_suggestion_names_nccl_nthreads_per_protocol():
    """Ring Simple runs NCCL_NTHREADS plus a sync warp, ring LL exactly NCCL_NTHREADS (NCCL 2.28.9)."""
    from ccoverlap import KernelFootprint, plan

    p = plan("h200", KernelFootprint(256, 128, grid=132), KernelFootprint(640, 96, 22592, 82240, grid=16, cluster=4))
    shrink = next(s for s in p.suggestions if s.startswith("shrink"))
    assert shrink.startswith("shrink comm CTAs to 320 threads (NCCL_NTHREADS=288 for NCCL's Simple protocol, "
                             "NCCL_NTHREADS=320 for NCCL's LL)")
