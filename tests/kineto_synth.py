"""Kineto-shaped Chrome traces for tests, fixtures and the parse-throughput measurement.

Events have the fields and args torch.profiler writes (torch 2.x): cpu_op with
shapes, cuda_runtime (or cuda_driver) launches with correlation ids, kernels with
their launch args, ac2g flows, ProfilerStep annotations, deviceProperties and
distributedInfo before traceEvents; with CUDA sync events on, cudaEventRecord /
cudaStreamWaitEvent calls and CUPTI's "Stream Wait Event" records (cat cuda_sync),
shaped as torch 2.11 writes them (wait_on_stream and the record's correlation -1).
"""
from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass
from pathlib import Path

H200_PROPS = {
    "id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150_000_000_000, "computeMajor": 9, "computeMinor": 0,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 233472, "numSms": 132, "sharedMemPerBlockOptin": 232448,
}
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
        "5x_cublas")
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
               "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")


@dataclass
class K:
    """A GPU activity to put in a trace: `cat` kernel, gpu_memcpy or gpu_memset."""

    name: str
    ts: float
    dur: float
    stream: int = 7
    cat: str = "kernel"
    block: int = 256
    grid: int = 132
    regs: int = 32
    smem: int = 0
    launch_ts: float | None = None  # CPU time of the launch call; default 5 us before ts
    launch_dur: float = 4
    tid: int | None = None  # CPU thread of the launch call; default the process id (the main thread)
    driver: bool = False  # launched with cuLaunchKernelEx (cat cuda_driver), as NCCL launches
    args: dict | None = None  # more kernel args (e.g. NCCL's "Collective name", "In msg nelems")


@dataclass(eq=False)
class Call:
    """A CPU runtime call with its own correlation id: cudaEventRecord*, cudaStreamWaitEvent."""

    name: str
    ts: float
    dur: float = 1.0
    tid: int | None = None


@dataclass(eq=False)
class Wait:
    """CUPTI's "Stream Wait Event" for the cudaStreamWaitEvent `call`: `stream` waits for event `event_id`.

    `record` (a Call) and `wait_on_stream` fill the fields torch 2.11 leaves at -1; give them to
    mimic a Kineto that resolves them."""

    call: Call
    stream: int
    event_id: int = -1
    wait_on_stream: int = -1
    record: Call | None = None


def collective(name: str = "allreduce", nelems: int = 1 << 20, group: str = "0") -> dict:
    """The args torch writes on an NCCL kernel (record_param_comms)."""
    return {"Collective name": name, "In msg nelems": nelems, "Out msg nelems": nelems, "Group size": 2,
            "dtype": "BFloat16", "Process Group Name": group, "Process Group Ranks": "[0, 1]"}


def events(kernels: list[K], steps: list[tuple[float, float]], *, pid: int = 4242, cpu_noise: int = 0, seed: int = 0,
           calls: list[Call] = (), waits: list[Wait] = (), cuda_events: list[tuple[Call, int, int]] = ()):
    """Trace events for the kernels, their launches, flows and profiler steps (+ cpu_noise cpu_ops each),
    the CPU calls, Stream Wait Event records and cuda_event records ((record call, stream, event id): what a
    Kineto with CUDA event activities writes) given."""
    rnd = random.Random(seed)
    yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python3"}}
    call_corr = {id(c): 1_000_000 + i for i, c in enumerate(calls)}
    for c in calls:
        yield {"ph": "X", "cat": "cuda_runtime", "name": c.name, "pid": pid, "tid": pid if c.tid is None else c.tid,
               "ts": c.ts, "dur": c.dur, "args": {"cbid": 135, "correlation": call_corr[id(c)]}}
    for w in waits:
        yield {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": w.stream,
               "ts": w.call.ts + w.call.dur / 2, "dur": 0,
               "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": w.wait_on_stream,
                        "wait_on_cuda_event_record_corr_id": call_corr[id(w.record)] if w.record else -1,
                        "wait_on_cuda_event_id": w.event_id, "stream": w.stream,
                        "correlation": call_corr[id(w.call)], "device": 0, "context": 1}}
    for call, stream, event_id in cuda_events:
        yield {"ph": "X", "cat": "cuda_event", "name": "cudaEvent", "pid": 0, "tid": stream, "ts": call.ts, "dur": 0,
               "args": {"event_id": event_id, "stream": stream, "correlation": call_corr[id(call)], "device": 0,
                        "context": 1}}
    for n, (ts, dur) in enumerate(steps, start=1):
        yield {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": pid, "tid": pid,
               "ts": ts, "dur": dur, "args": {"External id": n, "Record function id": 0, "Ev Idx": n}}
    for corr, k in enumerate(kernels, start=100):
        launch = k.ts - 5 if k.launch_ts is None else k.launch_ts
        for i in range(cpu_noise):
            yield {"ph": "X", "cat": "cpu_op", "name": rnd.choice(["aten::mm", "aten::add_", "aten::empty"]),
                   "pid": pid, "tid": pid, "ts": launch - 3 + i * 0.01, "dur": 2.5,
                   "args": {"External id": corr, "Record function id": 0, "Ev Idx": corr * 3 + i,
                            "Input Dims": [[4096, 4096], [4096, 4096]],
                            "Input type": ["c10::BFloat16", "c10::BFloat16"],
                            "Input Strides": [[4096, 1], [4096, 1]], "Concrete Inputs": ["", ""],
                            "Sequence number": corr, "Fwd thread id": 0}}
        call = "cuLaunchKernelEx" if k.driver else "cudaLaunchKernel" if k.cat == "kernel" else "cudaMemcpyAsync"
        yield {"ph": "X", "cat": "cuda_driver" if k.driver else "cuda_runtime", "name": call, "pid": pid,
               "tid": pid if k.tid is None else k.tid, "ts": launch, "dur": k.launch_dur,
               "args": {"External id": corr, "cbid": 211, "correlation": corr}}
        yield {"ph": "s", "id": corr, "pid": pid, "tid": pid, "ts": launch, "cat": "ac2g", "name": "ac2g"}
        args = {"External id": corr, "queued": 0, "device": 0, "context": 1, "stream": k.stream, "correlation": corr}
        if k.cat == "kernel":
            args |= {"registers per thread": k.regs, "shared memory": k.smem, "blocks per SM": k.grid / 132,
                     "warps per SM": k.grid * k.block / 32 / 132, "grid": [k.grid, 1, 1], "block": [k.block, 1, 1],
                     "est. achieved occupancy %": 50} | (k.args or {})
        else:
            args |= {"bytes": 1 << 20, "memory bandwidth (GB/s)": 100.0}
        yield {"ph": "X", "cat": k.cat, "name": k.name, "pid": 0, "tid": k.stream, "ts": k.ts, "dur": k.dur,
               "args": args}
        yield {"ph": "f", "id": corr, "pid": 0, "tid": k.stream, "ts": k.ts, "cat": "ac2g", "name": "ac2g", "bp": "e"}


def header(rank: int | None, world: int) -> dict:
    head = {"schemaVersion": 1, "deviceProperties": [H200_PROPS], "cupti_version": 26, "cuda_runtime_version": 13000}
    if rank is not None:
        head["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world, "pg_count": 1,
                                   "nccl_version": "2.28.9"}
    return head


def _open(path: Path):
    return gzip.open(path, "wt", compresslevel=6) if path.name.endswith(".gz") else open(path, "w")


def write(path: Path, rank: int | None, world: int, kernels: list[K], steps: list[tuple[float, float]], **kw) -> Path:
    """Write a whole trace, streamed event by event (so it also serves very large ones)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _open(path) as fh:
        fh.write(json.dumps(header(rank, world))[:-1] + ', "traceEvents": [\n')
        first = True
        for ev in events(kernels, steps, **kw):
            fh.write(("" if first else ",\n") + json.dumps(ev))
            first = False
        fh.write(f'\n], "traceName": {json.dumps(path.name)}, "displayTimeUnit": "ms", '
                 f'"baseTimeNanoseconds": 1700000000000000000}}\n')
    return path


def random_run(seed: int, steps: int, *, pad: int = 0,
               float_times: bool = False) -> tuple[list[K], list[tuple[float, float]]]:
    """A training-like run: per step a few GEMMs and elementwise kernels on stream 7, an all-reduce on
    stream 13 that overlaps part of them, a memcpy; `pad` adds shared memory to the elementwise launches."""
    rnd = random.Random(seed)
    kernels: list[K] = []
    step_list = []
    t = 1000.0
    num = (lambda x: round(x, 3)) if float_times else (lambda x: float(int(x)))
    for _ in range(steps):
        start = t
        kernels.append(K("Memcpy HtoD (Pageable -> Device)", num(t), num(rnd.uniform(5, 20)), cat="gpu_memcpy"))
        t = kernels[-1].ts + kernels[-1].dur + num(rnd.uniform(1, 10))
        comm_start = num(t + rnd.uniform(0, 300))
        kernels.append(K(NCCL, comm_start, num(rnd.uniform(400, 1500)), stream=13, block=640, grid=16, regs=96,
                         smem=104832))
        for _ in range(rnd.randint(3, 6)):
            name, dur = rnd.choice([(GEMM, rnd.uniform(100, 400)), (ELEMENTWISE, rnd.uniform(3, 30))])
            gemm = name == GEMM
            kernels.append(K(name, num(t), num(dur), block=384 if gemm else 256, grid=132 if gemm else 1024,
                             regs=168 if gemm else 16, smem=213504 if gemm else pad))
            t = kernels[-1].ts + kernels[-1].dur + num(rnd.uniform(0, 40))
        t = max(t, kernels[-1].ts) + num(rnd.uniform(50, 200))
        step_list.append((start - 20, t - start + 10))
    return kernels, step_list
