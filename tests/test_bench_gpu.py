"""The bench on GPUs with NCCL (run on the device); skipped without CUDA."""
import json

import pytest

from ccoverlap.gpu import cuda_driver
from ccoverlap.cli import main

pytestmark = pytest.mark.gpu


def test_ddp_and_micro_with_nccl_on_every_visible_gpu(tmp_path):
    gpus = cuda_driver.driver().device_count()
    out = tmp_path / "r.json"
    code = main(["bench", "--workload", "micro,ddp", "--comm", "nccl", "--nproc", str(gpus), "--tiny",
                 "--steps", "5", "--strategies", "default,priority,shape", "--repeats", "1", "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == 0 and data["provenance"]["backend"] == "nccl"
    assert all(r["status"] == "ok" for r in data["rows"]) and all(m["match"] for m in data["outputs_match"].values())


def test_the_emulation_proxy_has_nccls_footprint_and_pace():
    import statistics

    import torch

    from ccoverlap.bench import emulate
    from ccoverlap.bench.proxy import ProxyMover
    from ccoverlap.model.limits import read_live
    from ccoverlap.model.nccl import nccl_footprint

    e = emulate.Emulation(world=8, busbw_gbps=280.0)
    device = torch.device("cuda", 0)
    mover = ProxyMover(e, device)
    nccl = nccl_footprint(arch=read_live(0).arch).footprint
    assert abs(mover.kernel.regs - nccl.regs) <= 8 and mover.kernel.static_smem == nccl.static_smem
    # alone, an emulated 64 MiB all-reduce takes its ring bytes at the bus bandwidth
    t = torch.randn(16 * 2**20, device=device)
    before = t.clone()
    ring = emulate.ring_bytes("allreduce", t.nbytes, 8)
    shape = mover.emulation.shape("allreduce", t.nbytes)
    times = []
    for i in range(13):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(mover.stream):
            torch.cuda._sleep(2_000_000)  # the host queues the launch meanwhile: its Python is not timed
        start.record(mover.stream)
        mover.move(t, t, ring, shape)
        end.record(mover.stream)
        end.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end))
    assert statistics.median(times) == pytest.approx(ring / 280e9 * 1e3, rel=0.15)
    assert torch.equal(t, before)  # an all-reduce where the other ranks add zeros
    # NCCL's all-reduce launch: 512 threads (ring LL), 24 CTAs in clusters of 4, 82,240 B of dynamic smem
    assert (shape.dynamic_smem, mover.log.to_dict()["allreduce"]) == (
        82240, [{"threads": 512, "ctas": 24, "cluster": 4, "launches": 13}])
    # an all-gather tiles this rank's shard, on the GPU as on the CPU
    shard, out = torch.randn(4096, device=device), torch.zeros(8 * 4096, device=device)
    mover.move(shard, out, emulate.ring_bytes("allgather", out.nbytes, 8),
               mover.emulation.shape("allgather", out.nbytes))
    torch.cuda.synchronize()
    assert torch.equal(out.view(8, -1), shard.expand(8, -1))


def test_the_emulated_proxies_honour_nccl_threads_as_nccl_does():
    """NCCL_NTHREADS=256: ring LL (the all-reduce) runs 256 threads, ring Simple (the large all-gather) 256 plus
    its sync warp; point-to-point stays at 640; dynamic shared memory stays sized for 640 threads."""
    import torch

    from ccoverlap.bench import emulate
    from ccoverlap.bench.proxy import ProxyMover

    device = torch.device("cuda", 0)
    mover = ProxyMover(emulate.Emulation.from_env(8, 280.0, env={"NCCL_NTHREADS": "256"}), device)
    t = torch.randn(16 * 2**20, device=device)
    for kind in ("allreduce", "allgather", "alltoall"):
        mover.move(t, t, emulate.ring_bytes(kind, t.nbytes, 8), mover.emulation.shape(kind, t.nbytes))
    torch.cuda.synchronize()
    assert {k: [(s["threads"], s["ctas"], s["cluster"]) for s in v] for k, v in mover.log.to_dict().items()} == {
        "allreduce": [(256, 24, 4)], "allgather": [(288, 24, 4)], "alltoall": [(640, 32, 4)]}


def test_the_interposer_sees_the_proxy_launch_nccls_footprint(tmp_path):
    """Read back at cuLaunchKernelEx by the interposer (its comm_footprint: the first communication launch)."""
    out = tmp_path / "k.json"
    code = main(["bench", "--comm", "emulate", "--workload", "micro", "--tiny", "--micro-sizes", str(64 * 2**20),
                 "--steps", "2", "--warmup", "1", "--strategies", "shape,nccl-threads+shape,nccl-cluster+shape",
                 "--repeats", "1", "--json", str(out)])
    rows = {r["strategy"]: r for r in json.loads(out.read_text())["rows"]}
    assert code == 0 and all(r["status"] == "ok" for r in rows.values())
    seen = {name: r["runs"][0]["interposer"]["comm_footprint"] for name, r in rows.items()}
    assert {n: (f["name"], f["threads"], f["grid"], f["cluster"], f["dynamic_smem"]) for n, f in seen.items()} == {
        "shape": ("comm_paced", 512, 24, 4, 82240), "nccl-threads+shape": ("comm_paced", 256, 24, 4, 82240),
        "nccl-cluster+shape": ("comm_paced", 512, 24, 1, 82240)}
    assert rows["shape"]["emulation"]["launches"]["allreduce"][0]["threads"] == 512


def test_emulated_workloads_on_one_gpu(tmp_path):
    out = tmp_path / "e.json"
    code = main(["bench", "--comm", "emulate", "--workload", "ddp,moe", "--tiny", "--steps", "3",
                 "--strategies", "default,priority,shape", "--repeats", "1", "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == 0 and data["provenance"]["backend"] == "ccov_emulate"
    assert all(r["status"] == "ok" for r in data["rows"]) and all(m["match"] for m in data["outputs_match"].values())
    shaped = next(r for r in data["rows"] if r["strategy"] == "shape")
    assert sum(s["launches"] for kind in shaped["emulation"]["launches"].values() for s in kind) > 0
    # the interposer saw the proxies as comm
    assert shaped["runs"][0]["interposer"]["comm_footprint"]["name"] == "comm_paced"
