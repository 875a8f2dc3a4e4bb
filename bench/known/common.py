"""What the known-answer programs share: a torch training loop (torch.optim.SGD, so `ccoverlap doctor` and `tune`
find its steps) around a few custom kernels on two streams, and a stand-in for a communication library.

Each program's step: the model's forward and backward (torch), then its own kernels: compute kernels on the
compute stream (or a green context's stream) and one communication kernel on a second stream that reads the
gradients and writes them back; the optimizer waits for it. Every cross-stream wait comes right after the record
of its event, with no other record between them on the thread: torch 2.11's traces do not say which event a
stream waited for, and the doctor then takes the thread's latest record (docs/analysis.md). Kernels are compiled with
NVRTC and launched through the CUDA driver (cuLaunchKernelEx, as NCCL launches), so the launch interposer sees every
launch. Compute kernels hold their SMs for a set time from each block's start (%globaltimer) and write a value that the
loss adds, so the losses say whether a lever changed what a kernel computed. The communication kernel is named as NCCL's
kernels are (`ncclDevKernel_*`, so the doctor and the interposer class it as communication without
--comm-regex) and its "library" honours the variables NCCL and torch's NCCL process groups read: NCCL_MAX_CTAS
(fewer CTAs, each moving more), NCCL_NTHREADS (fewer threads per CTA, read as NCCL reads it for the protocol
its threads say, model/nccl.protocol_of: Simple's sync warp added, 640-thread launches untouched; each moving
less; until 2026-12-04 it added the sync warp to every launch and shrank 640-thread ones too, which NCCL does
not), NCCL_CGA_CLUSTER_SIZE (clusters of 4 by default on sm_90, where they divide the grid) and
TORCH_NCCL_HIGH_PRIORITY (its stream at the device's greatest priority). Its CTAs each take a set time for a
set share of the work, from their own start: a CTA that starts late ends late, as a collective waiting on a
network does.

Run: python bench/known/<name>.py --steps N [--json PATH]  (PATH gets the step times and the losses).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ccoverlap.gpu import cuda_driver as cu
from ccoverlap.gpu.nvrtc import compile_cubin
from ccoverlap.lab.kernels import CudaKernel
from ccoverlap.model import nccl

SOURCE = r"""
__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// A compute kernel: each block holds its SM's resources for spin_ns from its own start, then writes a value.
// One instantiation per role: a function's attributes (a carveout hint, a raised shared-memory limit) are its own.
#define COMPUTE(NAME)                                                                                       \
    extern "C" __global__ void NAME(const float* in, float* out, int n, unsigned long long spin_ns) {      \
        unsigned long long t0 = now_ns();                                                                   \
        while (now_ns() - t0 < spin_ns) {}                                                                  \
        if (threadIdx.x == 0) out[blockIdx.x % n] = in[blockIdx.x % n] * 0.5f + 1.0f;                       \
    }
COMPUTE(known_compute)
COMPUTE(known_wide)
COMPUTE(known_fat)
COMPUTE(known_green)

// The communication kernel: copies the gradients through dynamic shared memory (staged) or directly, then
// holds its SM until cta_ns after its own start.
extern "C" __global__ void ncclDevKernel_KnownAllReduce(const float* src, float* dst, long long n, int staged,
                                                        unsigned long long cta_ns) {
    extern __shared__ float stage[];
    unsigned long long t0 = now_ns();
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        if (staged) {
            stage[threadIdx.x] = src[i];
            dst[i] = stage[threadIdx.x];
        } else {
            dst[i] = src[i];
        }
    }
    while (now_ns() - t0 < cta_ns) {}
}
"""
COMPUTE_NAMES = ("known_compute", "known_wide", "known_fat", "known_green")
COMM_NAME = "ncclDevKernel_KnownAllReduce"
N = 4096  # model size: floats of w, its gradient, and the compute kernels' outputs
OUT = 8192  # the compute kernels' output slots
CLOCK_HZ = 1.98e9  # an H100's and an H200's boost clock: --hold-ms's spin in cycles (a hold, not a timing)


def kernels() -> dict[str, CudaKernel]:
    """Every kernel of SOURCE, compiled for this GPU (cached on disk) and loaded as CUkernels."""
    major, minor = torch.cuda.get_device_capability()
    drv = cu.driver()
    handles = drv.load_kernels(compile_cubin(SOURCE, f"sm_{major}{minor}"), [*COMPUTE_NAMES, COMM_NAME])
    return {name: CudaKernel(h, name, drv.kernel_attribute(cu.FUNC_NUM_REGS, h, 0),
                             drv.kernel_attribute(cu.FUNC_SHARED_SIZE_BYTES, h, 0)) for name, h in handles.items()}


@dataclass
class Comm:
    """The communication library's one collective: `ctas` CTAs of `threads` threads with `smem` bytes of dynamic
    shared memory, taking `ms` in all when nothing holds it back, as NCCL's variables change them."""

    kernel: CudaKernel
    stream: torch.cuda.Stream
    ctas: int
    threads: int
    smem: int
    cluster: int
    cta_ns: int

    @classmethod
    def create(cls, kernel: CudaKernel, ctas: int, threads: int, smem: int, ms: float) -> Comm:
        knobs = nccl.Knobs.from_env(os.environ)
        mine = max(1, min(ctas, knobs.max_ctas))
        # NCCL_NTHREADS as NCCL reads it for the protocol these threads are (a sync warp for ring Simple only;
        # 640, point-to-point or LL128, never set by it), never more threads than the launch had
        nt = threads if knobs.nthreads is None else min(threads, knobs.threads(nccl.protocol_of(threads) or "SIMPLE",
                                                                                 threads))
        # the same work on fewer CTAs, or with fewer threads each, takes each CTA longer
        cta_ns = int(ms * 1e6 * ctas / mine * threads / nt)
        high = os.environ.get("TORCH_NCCL_HIGH_PRIORITY") == "1"
        drv = cu.driver()
        greatest = drv.stream_priority_range(0)[1]
        stream = torch.cuda.ExternalStream(drv.create_stream(greatest if high else 0))
        return cls(kernel, stream, mine, nt, smem, nccl.cluster_dim(knobs.cluster, mine), cta_ns)

    def all_reduce(self, grad: torch.Tensor, after: torch.cuda.Event) -> None:
        """The collective on `grad` in place, once `after` has happened (Ctx.join(ctx.comm.stream) waits for it)."""
        self.stream.wait_event(after)
        args = [ctypes.c_void_p(grad.data_ptr()), ctypes.c_void_p(grad.data_ptr()), ctypes.c_longlong(grad.numel()),
                ctypes.c_int(1 if self.smem >= 4 * self.threads else 0), ctypes.c_ulonglong(self.cta_ns)]
        self.kernel.launch(self.ctas, self.threads, self.stream.cuda_stream, args, self.smem, self.cluster)


@dataclass
class Ctx:
    """What a program's step body has: its kernels, buffers and the communication library."""

    kernels: dict[str, CudaKernel]
    comm: Comm
    inputs: torch.Tensor  # what compute kernels read
    out: torch.Tensor  # what they write (added to the loss)
    spans: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = field(default_factory=dict)
    notes: dict[str, float] = field(default_factory=dict)  # what a program measured once (a kernel's time alone)

    def compute(self, name: str, grid: int, block: int, us: float, smem: int = 0,
                stream: torch.cuda.Stream | None = None) -> None:
        """Launch compute kernel `name` (each block holds its SM `us` microseconds) on `stream` (default: the current
        stream)."""
        stream = stream or torch.cuda.current_stream()
        args = [ctypes.c_void_p(self.inputs.data_ptr()), ctypes.c_void_p(self.out.data_ptr()), ctypes.c_int(OUT),
                ctypes.c_ulonglong(int(us * 1000))]
        self.kernels[name].launch(grid, block, stream.cuda_stream, args, smem)

    @staticmethod
    def mark(stream: torch.cuda.Stream | None = None) -> torch.cuda.Event:
        """An event recorded on `stream` (default: the current stream) after what was launched on it so far."""
        event = torch.cuda.Event()
        event.record(stream or torch.cuda.current_stream())
        return event

    def span(self, name: str, start: torch.cuda.Event, end: torch.cuda.Event) -> None:
        """Time from `start` to `end` (timing events), one a step: written per step as spans_ms[name]."""
        self.spans.setdefault(name, []).append((start, end))

    @staticmethod
    def timed(stream: torch.cuda.Stream | None = None) -> torch.cuda.Event:
        """A timing event recorded on `stream` (default: the current stream) now."""
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream or torch.cuda.current_stream())
        return event

    def join(self, stream: torch.cuda.Stream) -> None:
        """The current stream waits for everything launched on `stream` so far (record, then wait at once)."""
        torch.cuda.current_stream().wait_event(self.mark(stream))


Body = Callable[[Ctx, torch.Tensor], torch.Tensor | None]  # (ctx, the gradient) -> a tensor the loss adds, or None


def main(describe: str, comm: dict, body: Body, setup: Callable[[Ctx], None] | None = None) -> None:
    """Parse --steps and --json, build the model, the kernels and the communication library (`comm`: Comm.create's
    ctas, threads, smem, ms), then train: each step forward, backward, `body` (the program's kernels on the
    gradient), the optimizer. Writes the step times (CUDA events on the current stream) and losses to --json."""
    p = argparse.ArgumentParser(description=describe)
    p.add_argument("--steps", type=int, default=20, help="optimizer steps (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the times written (default 3)")
    p.add_argument("--json", help="write the step times (ms) and the losses (float.hex) here")
    p.add_argument("--hold-ms", type=float, default=0.0,
                   help="hold the GPU this long (a one-block spin) before each step, so the step's launches queue "
                        "ahead of it as they do where the host outruns the GPU (default 0: no hold)")
    args = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    w = torch.randn(N, device=dev, requires_grad=True)
    x, y = torch.randn(N, device=dev), torch.randn(N, device=dev)
    ks = kernels()
    ctx = Ctx(ks, Comm.create(ks[COMM_NAME], **comm), torch.rand(OUT, device=dev) + 0.5, torch.zeros(OUT, device=dev))
    if setup:
        setup(ctx)
    opt = torch.optim.SGD([w], lr=0.01)
    extra = torch.zeros((), device=dev)
    losses, marks = [], []
    started = time.perf_counter()
    for _ in range(args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if args.hold_ms > 0:  # outside the step's time: the launches after it wait behind it
            torch.cuda._sleep(int(args.hold_ms * 1e-3 * CLOCK_HZ))
        start.record()
        opt.zero_grad(set_to_none=False)
        loss = ((w * x - y) ** 2).mean() + 1e-3 * ctx.out.mean() + 1e-6 * extra
        loss.backward()
        got = body(ctx, w.grad)
        extra = got if got is not None else extra
        opt.step()
        end.record()
        losses.append(loss.detach())
        marks.append((start, end))
    torch.cuda.synchronize()
    wall = time.perf_counter() - started
    times = [s.elapsed_time(e) for s, e in marks][args.warmup:]
    spans = {k: [s.elapsed_time(e) for s, e in v][args.warmup:] for k, v in ctx.spans.items()}
    result = {"steps_ms": times, "spans_ms": spans, "notes": ctx.notes,
              "losses": [float(v).hex() for v in torch.stack(losses).tolist()], "wall_s": wall,
              "comm": {"ctas": ctx.comm.ctas, "threads": ctx.comm.threads, "cluster": ctx.comm.cluster,
                       "smem": ctx.comm.smem, "cta_ns": ctx.comm.cta_ns}}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    ordered = sorted(times)
    print(f"{describe.split(':')[0]}: {args.steps} steps, median {ordered[len(ordered) // 2]:.3f} ms" if times else "")
