"""The GPU side of `--comm emulate`: each collective becomes one launch of the paced proxy kernel
(kernels.cu: comm_paced) on a communication stream of its own, as NCCL has.

The worker hands a ProxyMover to `emulate.init`; emulate.py does not import this module, so the
dependency runs one way (proxy -> emulate)."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from ccoverlap import cuda_driver as cu
from ccoverlap import kernels
from ccoverlap.bench.emulate import Emulation, tile
from ccoverlap.limits import read_live
from ccoverlap.nccl import nccl_footprint

WORD = 16  # bytes per proxy element (uint4)
NCCL_SHMEM_PER_WARP = 4112  # NCCL's dynamic shared memory per warp of a CTA (nccl.py: 20 warps -> 82,240 B)


@dataclass(frozen=True)
class Launch:
    """One proxy launch: CTAs, elements and pace; pure arithmetic, tested on the CPU."""

    ctas: int
    total: int  # elements of WORD bytes read and written
    step_ns: int  # each CTA's time per step of threads x unroll elements

    @classmethod
    def plan(cls, e: Emulation, unroll: int, ring: int, dst_bytes: int) -> Launch:
        total = max(_ceil(ring, WORD), dst_bytes // WORD, 1)
        ctas, step_ns = kernels.pace(total, e.ctas, e.threads * unroll, e.duration_ns(ring))
        return cls(ctas, total, step_ns)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class ProxyMover:
    def __init__(self, emulation: Emulation, device: torch.device):
        limits = read_live(device.index or 0)
        fp = nccl_footprint(arch=limits.arch, ctas=emulation.ctas).footprint
        self.emulation, self.device = emulation, device
        self.kernel = kernels.build_comm_proxy(limits.arch, fp.regs, fp.static_smem, name="comm_paced")
        self.unroll = self.kernel.unroll
        self.dynamic = emulation.threads // 32 * NCCL_SHMEM_PER_WARP
        least, greatest = limits.stream_priority_range
        self.stream = torch.cuda.ExternalStream(cu.driver().create_stream(greatest if emulation.high_priority else least))
        self.launches = 0

    def footprint(self):
        return self.kernel.footprint(self.emulation.threads, self.dynamic, self.emulation.ctas)

    def move(self, src: torch.Tensor, dst: torch.Tensor, nbytes: int) -> None:
        """After the work queued so far on the current stream, move `nbytes` on the comm stream."""
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        for t in (src, dst):
            t.record_stream(self.stream)  # the caller may free them before the proxy has run
        aligned = all(t.data_ptr() % WORD == 0 and t.nbytes % WORD == 0 for t in (src, dst))
        if not aligned:  # rare (odd-sized views): the data by torch, the traffic by the proxy in place
            with torch.cuda.stream(self.stream):
                tile(src, dst)
            src = dst
        launch = Launch.plan(self.emulation, self.unroll, nbytes, dst.nbytes)
        args = [ctypes.c_void_p(src.data_ptr()), ctypes.c_longlong(max(src.nbytes // WORD, 1)),
                ctypes.c_void_p(dst.data_ptr()), ctypes.c_longlong(max(dst.nbytes // WORD, 1)),
                ctypes.c_longlong(launch.total if dst.nbytes >= WORD else 0), ctypes.c_longlong(launch.step_ns),
                ctypes.c_int(self.dynamic // WORD), ctypes.c_void_p(0)]
        self.kernel.launch(launch.ctas, self.emulation.threads, self.stream.cuda_stream, args, self.dynamic)
        self.launches += 1

    def done(self, outputs: list[torch.Tensor]) -> torch.futures.Future:
        """A CUDA-aware future: whoever waits on it waits, on their own stream, for the proxies."""
        fut = torch.futures.Future(devices=[self.device])
        with torch.cuda.stream(self.stream):
            fut.set_result(outputs)
        return fut
