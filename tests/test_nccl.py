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


def test_info_and_plan_give_one_answer_for_each_device(monkeypatch, capsys):
    """`info --nccl` shows the footprint for each NVIDIA device it shows (no GPU here: the presets), so the
    cluster it gives an H200 is the one `plan --device h200 --comm nccl` plans with: 4 from sm_90 on, 1 before."""
    import json

    from ccoverlap.cli import main
    from ccoverlap.gpu import cuda_driver

    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    monkeypatch.setattr(nccl, "find_libnccl", lambda: None)
    assert main(["info", "--nccl", "--json", "-"]) == 0
    info = json.loads(capsys.readouterr().out)["nccl"]
    assert {name: fp["cluster"] for name, fp in info.items()} == {"a40": 1, "a100": 1, "h100": 4, "h200": 4}
    assert main(["plan", "--device", "h200", "--compute", "threads=256,regs=16", "--comm", "nccl"]) == 0
    assert f"cluster {info['h200']['cluster']} -> " in capsys.readouterr().out
    assert "4 from sm_90 on, none before" in info["h200"]["sources"]["cluster"]
    assert "NOTES" not in json.dumps(info) and "bench/results/" in info["h200"]["sources"]["regs"]
