"""Compute families and communication proxies for the lab, each enqueued on a given stream.

Custom kernels (fma, elementwise) know their footprint, so the lab shapes them
itself; library kernels (cuBLAS, flash attention, a transformer block) are
shaped only by the interposer. Inputs are random, never zeros.
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.lab.kernels import CudaKernel, pace, ptr

NULL = ctypes.c_void_p(0)


@dataclass
class Stream:
    """A raw CUDA stream and its torch view (for events and torch ops)."""

    handle: int
    torch: torch.cuda.Stream

    @classmethod
    def wrap(cls, stream: torch.cuda.Stream) -> Stream:
        return cls(stream.cuda_stream, stream)

    @classmethod
    def raw(cls, handle: int) -> Stream:
        return cls(handle, torch.cuda.ExternalStream(handle))


@dataclass
class Phase:
    """One compute family: what it launches and, for custom kernels, its block footprint."""

    name: str
    footprint: KernelFootprint | None
    uses_cublas: bool
    enqueue_fn: Callable[[Stream, int, ctypes.c_void_p], None]  # (stream, pad bytes, stamps pointer)
    outputs: Callable[[], list[torch.Tensor]]
    blocks: int = 0  # blocks per enqueue that stamp (0: library kernels)
    exact: bool = True  # outputs reproducible bit for bit
    kernels: tuple[CudaKernel, ...] = ()  # the custom kernels it launches (carveout hints go on them)
    stamps: torch.Tensor | None = None

    def __post_init__(self):
        if self.blocks:
            self.stamps = torch.zeros(self.blocks, 3, dtype=torch.int64, device="cuda")

    def enqueue(self, stream: Stream, pad: int = 0) -> None:
        self.enqueue_fn(stream, pad, ptr(self.stamps) if self.stamps is not None else NULL)

    def hint(self, percent: int | None) -> None:
        """Set the preferred shared-memory carveout of this phase's own kernels (None: no preference)."""
        for kernel in self.kernels:
            kernel.prefer_carveout(percent)

    def snapshot(self) -> list[torch.Tensor]:
        return [o.clone() for o in self.outputs()]


def fma(kernel: CudaKernel, sm_count: int, iters: int, waves: int = 6, threads: int = 256) -> Phase:
    grid = sm_count * (2048 // threads) * waves
    return _fma_phase("fma", kernel, grid, threads, iters)


def sparse(kernel: CudaKernel, sm_count: int, ms: float, threads: int = 256) -> Phase:
    """One FMA block per SM for about `ms`, without shared memory: threads and registers leave room
    for a communication CTA, and only the SM's shared-memory carveout can keep it out."""
    grid, probe = sm_count, 20000
    phase = _fma_phase("sparse", kernel, grid, threads, probe)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    stream = Stream.wrap(torch.cuda.current_stream())
    phase.enqueue(stream)  # warm-up: module load, clocks
    start.record()
    phase.enqueue(stream)
    end.record()
    end.synchronize()
    return _fma_phase("sparse", kernel, grid, threads, max(int(probe * ms / start.elapsed_time(end)), 1))


def _fma_phase(name: str, kernel: CudaKernel, grid: int, threads: int, iters: int) -> Phase:
    src = torch.rand(grid * threads, device="cuda")
    out = torch.empty_like(src)

    def run(stream, pad, stamps):
        kernel.launch(grid, threads, stream.handle, [ptr(src), ptr(out), ctypes.c_int(iters), stamps], shared_mem=pad)

    return Phase(name, kernel.footprint(threads, grid=grid), False, run, lambda: [out], blocks=grid, kernels=(kernel,))


def elementwise(kernel: CudaKernel, gib: float, launches: int, threads: int = 256) -> Phase:
    n4 = int(gib * 2**30) // 16
    x, y = (torch.rand(n4 * 4, device="cuda") for _ in range(2))
    z = torch.empty_like(x)
    grid = -(-n4 // (threads * 4))

    def run(stream, pad, stamps):
        for i in range(launches):
            last = stamps if i == launches - 1 else NULL
            kernel.launch(grid, threads, stream.handle, [ptr(x), ptr(y), ptr(z), ctypes.c_longlong(n4), last],
                          shared_mem=pad)

    return Phase("elementwise", kernel.footprint(threads, grid=grid), False, run, lambda: [z], blocks=grid,
                 kernels=(kernel,))


def _torch_phase(name: str, body, outputs, uses_cublas: bool, exact: bool) -> Phase:
    def run(stream, pad, stamps):
        with torch.cuda.stream(stream.torch):
            body()

    return Phase(name, None, uses_cublas, run, outputs, exact=exact)


def gemm(n: int, count: int) -> Phase:
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    c = torch.empty_like(a)

    def body():
        for _ in range(count):
            torch.matmul(a, b, out=c)

    return _torch_phase("gemm", body, lambda: [c], uses_cublas=True, exact=True)


def attention(batch: int, heads: int, seq: int, dim: int) -> Phase:
    q, k, v = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)

    def body():
        out.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))

    return _torch_phase("attention", body, lambda: [out], uses_cublas=False, exact=True)


class _Block(torch.nn.Module):
    """A pre-norm transformer block: attention (SDPA) and a 4x GELU MLP."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))


def transformer(batch: int, seq: int, d: int, heads: int) -> Phase:
    torch.manual_seed(0)
    block = _Block(d, heads).to("cuda", torch.bfloat16)
    x = torch.randn(batch, seq, d, device="cuda", dtype=torch.bfloat16)
    params = list(block.parameters())

    def body():
        for p in params:
            p.grad = None
        block(x).float().square().mean().backward()

    # flash-attention's backward accumulates with atomics: compare within bf16 tolerance
    return _torch_phase("transformer", body, lambda: [p.grad for p in params], uses_cublas=True, exact=False)


@dataclass(frozen=True)
class CommShape:
    """How one proxy launch is shaped: what NCCL's own knobs change (threads, CTAs, cluster)."""

    threads: int
    ctas: int
    cluster: int


@dataclass
class CommProxy:
    """A collective's stand-in over `nbytes`, footprint-matched to a real kernel.

    Unpaced (`step_ns` None), a reduce-copy (`comm_proxy`: out = a + b) streams through HBM as fast
    as it can; paced, the emulation's `comm_paced` copies a into out at the pace of a link
    (`ccoverlap.lab.kernels.pace`), so its memory traffic is what a collective's is."""

    kernel: CudaKernel
    shape: CommShape  # NCCL's default for this footprint; strategies may change it per launch
    name: str
    dynamic_smem: int
    nbytes: int
    busbw_gbps: float = 0.0  # 0: unpaced
    protocol: str = "SIMPLE"  # how NCCL_NTHREADS acts on it (ccoverlap.model.nccl.THREAD_RULES)

    def __post_init__(self):
        self.n4 = self.nbytes // 16
        self.a, self.b = (torch.rand(self.n4 * 4, device="cuda") for _ in range(2))
        self.out = torch.empty_like(self.a)
        self.stamps = torch.zeros(max(self.shape.ctas, 64), 3, dtype=torch.int64, device="cuda")
        self.ctas = self.shape.ctas  # the last launch's CTAs (their stamps are the timeline's)

    def footprint(self, shape: CommShape | None = None) -> KernelFootprint:
        s = shape or self.shape
        return self.kernel.footprint(s.threads, self.dynamic_smem, s.ctas, s.cluster)

    def enqueue(self, stream: Stream, shape: CommShape | None = None) -> None:
        s = shape or self.shape
        slots = max(self.dynamic_smem // 16, 1)
        if self.busbw_gbps:
            ctas, step_ns = pace(self.n4, s.ctas, s.threads * self.kernel.unroll, self.nbytes / self.busbw_gbps)
            args = [ptr(self.a), ctypes.c_longlong(self.n4), ptr(self.out), ctypes.c_longlong(self.n4),
                    ctypes.c_longlong(self.n4), ctypes.c_longlong(step_ns), ctypes.c_int(slots), ptr(self.stamps)]
        else:
            ctas = s.ctas
            args = [ptr(self.a), ptr(self.b), ptr(self.out), ctypes.c_longlong(self.n4), ctypes.c_int(slots),
                    ptr(self.stamps)]
        self.ctas = ctas
        self.kernel.launch(ctas, s.threads, stream.handle, args, self.dynamic_smem, max(s.cluster, 1))

    def wrong(self) -> int:
        """Elements of the last result that differ from what the proxy computes (nccl-tests' #wrong)."""
        expected = self.a if self.busbw_gbps else self.a + self.b
        return int((self.out != expected).sum())
