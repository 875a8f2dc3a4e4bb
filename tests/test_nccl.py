from pathlib import Path

from ccoverlap.model import nccl

# An excerpt of `cuobjdump --dump-resource-usage libnccl.so.2` run on the H200 machine
# (NCCL 2.28.9 of torch 2.11's nvidia-nccl wheel): the sm_80 and sm_90 sections, trimmed.
SAMPLE = (Path(__file__).parent / "data" / "cuobjdump_nccl_sample.txt").read_text()


def test_parse_resource_usage_per_arch():
    rows = nccl.parse_resource_usage(SAMPLE)
    sm90 = [r for r in rows if r.arch == "sm_90"]
    assert len(sm90) == 5 and sm90[0].name == "_Z21ncclDevKernel_Generic24ncclDevKernelArgsStorageILm4096EE"
    assert [(r.regs, r.static_smem) for r in sm90 if "ncclDevKernel" in r.name] == [(96, 22592)] * 3
    assert sm90[3] == nccl.KernelResources("__cuda_sm20_div_u64", "sm_90", 0, 0, 0)
    assert any(r.arch == "sm_80" for r in rows)


def test_footprint_prefers_the_binary_and_labels_sources(monkeypatch):
    monkeypatch.setattr(nccl, "find_libnccl", lambda: "/opt/libnccl.so.2")
    monkeypatch.setattr(nccl, "find_cuobjdump", lambda: "/usr/bin/cuobjdump")
    found = nccl.nccl_footprint("sm_80", read=lambda lib, tool: nccl.parse_resource_usage(SAMPLE))
    assert found.footprint.regs == 96 and found.footprint.static_smem == 7104
    assert found.footprint.cluster == 1  # clusters exist from sm_90
    assert found.sources["regs"].startswith("cuobjdump --dump-resource-usage /opt/libnccl.so.2")
    assert "not read from the binary" in found.sources["threads"]


def test_footprint_falls_back_to_measured_numbers(monkeypatch):
    monkeypatch.setattr(nccl, "find_libnccl", lambda: None)
    found = nccl.nccl_footprint("sm_90")
    fp = found.footprint
    assert (fp.threads, fp.regs, fp.static_smem, fp.dynamic_smem, fp.cluster) == (640, 96, 22592, 82240, 4)
    assert "fallback" in found.sources["regs"]
    assert found.library is None
