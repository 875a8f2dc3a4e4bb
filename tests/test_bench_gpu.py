"""The bench on GPUs with NCCL (run on the device); skipped without CUDA."""
import json

import pytest

from ccoverlap import cuda_driver
from ccoverlap.cli import main

pytestmark = pytest.mark.gpu


def test_ddp_and_micro_with_nccl_on_every_visible_gpu(tmp_path):
    gpus = cuda_driver.driver().device_count()
    out = tmp_path / "r.json"
    code = main(["bench", "--workload", "micro,ddp", "--comm", "nccl", "--nproc", str(gpus), "--tiny",
                 "--steps", "5", "--strategies", "default,priority,shape", "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == 0 and data["provenance"]["backend"] == "nccl"
    assert all(r["status"] == "ok" for r in data["rows"]) and all(m["match"] for m in data["outputs_match"].values())


def test_the_emulation_proxy_has_nccls_footprint_and_pace():
    import statistics

    import torch

    from ccoverlap.bench import emulate
    from ccoverlap.bench.proxy import ProxyMover
    from ccoverlap.limits import read_live
    from ccoverlap.nccl import nccl_footprint

    e = emulate.Emulation(world=8, busbw_gbps=280.0)
    device = torch.device("cuda", 0)
    mover = ProxyMover(e, device)
    fp, nccl = mover.footprint(), nccl_footprint(arch=read_live(0).arch).footprint
    assert abs(fp.regs - nccl.regs) <= 8 and fp.static_smem == nccl.static_smem
    assert (fp.threads, fp.dynamic_smem) == (640, 82240)
    # alone, an emulated 64 MiB all-reduce takes its ring bytes at the bus bandwidth
    t = torch.randn(16 * 2**20, device=device)
    before = t.clone()
    ring = emulate.ring_bytes("allreduce", t.nbytes, 8)
    times = []
    for i in range(13):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(mover.stream)
        mover.move(t, t, ring)
        end.record(mover.stream)
        end.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end))
    assert statistics.median(times) == pytest.approx(ring / 280e9 * 1e3, rel=0.15)
    assert torch.equal(t, before)  # an all-reduce where the other ranks add zeros
    # an all-gather tiles this rank's shard, on the GPU as on the CPU
    shard, out = torch.randn(4096, device=device), torch.zeros(8 * 4096, device=device)
    mover.move(shard, out, emulate.ring_bytes("allgather", out.nbytes, 8))
    torch.cuda.synchronize()
    assert torch.equal(out.view(8, -1), shard.expand(8, -1))


def test_emulated_workloads_on_one_gpu(tmp_path):
    out = tmp_path / "e.json"
    code = main(["bench", "--comm", "emulate", "--workload", "ddp,moe", "--tiny", "--steps", "3",
                 "--strategies", "default,priority,shape", "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == 0 and data["provenance"]["backend"] == "ccov_emulate"
    assert all(r["status"] == "ok" for r in data["rows"]) and all(m["match"] for m in data["outputs_match"].values())
    shaped = next(r for r in data["rows"] if r["strategy"] == "shape")
    assert shaped["emulation"]["proxy_launches"] > 0
    assert shaped["interposer"]["comm_footprint"]["name"] == "comm_paced"  # the interposer saw the proxies as comm
