"""The GPU side of `--comm emulate`: each collective becomes one launch of the paced proxy kernel
(kernels.cu: comm_paced) on a communication stream of its own, as NCCL has.

The worker hands a ProxyMover to `emulate.init`; emulate.py does not import this module, so the
dependency runs one way (proxy -> emulate)."""
from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass

import torch

from ccoverlap.gpu import cuda_driver as cu
from ccoverlap.lab import kernels
from ccoverlap.bench.emulate import Emulation, LaunchLog, Shape, tile
from ccoverlap.model.limits import read_live
from ccoverlap.model.nccl import cluster_dim, nccl_footprint

WORD = 16  # bytes per proxy element (uint4)


@dataclass(frozen=True)
class Launch:
    """One proxy launch: NCCL's threads and cluster rule, CTAs and pace; pure arithmetic, tested on the CPU."""

    threads: int
    ctas: int
    cluster: int  # 1: none
    total: int  # elements of WORD bytes read and written
    step_ns: int  # each CTA's time per step of threads x unroll elements

    @classmethod
    def plan(cls, shape: Shape, duration_ns: int, unroll: int, ring: int, dst_bytes: int) -> Launch:
        """NCCL's `shape` moving `ring` bytes in `duration_ns`: no more CTAs than steps of work; the cluster
        as NCCL sets it for that grid."""
        total = max(_ceil(ring, WORD), dst_bytes // WORD, 1)
        ctas, step_ns = kernels.pace(total, shape.ctas, shape.threads * unroll, duration_ns)
        return cls(shape.threads, ctas, cluster_dim(shape.cluster, ctas), total, step_ns)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class ProxyMover:
    """One build of the paced proxy with the registers and static shared memory of the installed NCCL's
    kernels; threads, CTAs, cluster and NCCL's dynamic shared memory (sized for 640 threads whatever
    NCCL_NTHREADS says, NCCL issue 1985) come per launch from the emulation's Shape."""

    def __init__(self, emulation: Emulation, device: torch.device):
        limits = read_live(device.index or 0)
        fp = nccl_footprint(arch=limits.arch).footprint
        self.emulation = dataclasses.replace(emulation, clusters=fp.cluster > 1)  # clusters on sm_90 and newer
        self.device = device
        self.kernel = kernels.build_comm_proxy(limits.arch, fp.regs, fp.static_smem, name="comm_paced")
        self.unroll = self.kernel.unroll
        least, greatest = limits.stream_priority_range
        self.stream = torch.cuda.ExternalStream(
            cu.driver().create_stream(greatest if emulation.high_priority else least))
        self.log = LaunchLog()

    def move(self, src: torch.Tensor, dst: torch.Tensor, nbytes: int, shape: Shape) -> None:
        """After the work queued so far on the current stream, move `nbytes` on the comm stream."""
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        for t in (src, dst):
            t.record_stream(self.stream)  # the caller may free them before the proxy has run
        aligned = all(t.data_ptr() % WORD == 0 and t.nbytes % WORD == 0 for t in (src, dst))
        if not aligned:  # rare (odd-sized views): the data by torch, the traffic by the proxy in place
            with torch.cuda.stream(self.stream):
                tile(src, dst)
            src = dst
        launch = Launch.plan(shape, self.emulation.duration_ns(nbytes), self.unroll, nbytes, dst.nbytes)
        args = [ctypes.c_void_p(src.data_ptr()), ctypes.c_longlong(max(src.nbytes // WORD, 1)),
                ctypes.c_void_p(dst.data_ptr()), ctypes.c_longlong(max(dst.nbytes // WORD, 1)),
                ctypes.c_longlong(launch.total if dst.nbytes >= WORD else 0), ctypes.c_longlong(launch.step_ns),
                ctypes.c_int(shape.dynamic_smem // WORD), ctypes.c_void_p(0)]
        self.kernel.launch(launch.ctas, launch.threads, self.stream.cuda_stream, args, shape.dynamic_smem,
                           launch.cluster)
        self.log.add(shape.kind, launch.threads, launch.ctas, launch.cluster)

    def done(self, outputs: list[torch.Tensor]) -> torch.futures.Future:
        """A CUDA-aware future: whoever waits on it waits, on their own stream, for the proxies."""
        fut = torch.futures.Future(devices=[self.device])
        with torch.cuda.stream(self.stream):
            fut.set_result(outputs)
        return fut
