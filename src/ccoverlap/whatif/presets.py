"""A captured step on another GPU, at another bus bandwidth or world size: predictions, with their assumptions.

Other GPUs (model/limits.py's presets): the SMs, per-SM limits and priorities are the preset's; each compute
launch's time alone is scaled by a roofline ratio of the two devices' peaks (`PEAKS`, datasheet numbers),
not knowing whether FLOP/s or bandwidth binds it: the middle of the two ratios is predicted and both ends
bound the interval. A persistent grid (one full wave of the captured device) is resized to the new device's
SMs; a block beyond the new device's per-block limits is clamped to them (a library would pick another
tile), and said. Collectives keep their captured time unless a bus bandwidth or world size is given.

Collectives at another bus bandwidth or world size: an all-reduce's time alone is a bandwidth term, its bytes
per rank (`model.nccl.RING_FACTORS`) over the bus bandwidth, plus a latency term of `LINK_LATENCY_US` per step:
2(n-1) steps for a ring, 2 log2(n) for a tree; NCCL is taken to pick the faster.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ccoverlap.model import nccl
from ccoverlap.model.limits import DeviceLimits, get_device
from ccoverlap.util.errors import UsageError
from ccoverlap.whatif.residency import alone_per_sm
from ccoverlap.whatif.step import Kernel, Step

#: per-step latency of a collective over the links (an assumption: NVLink 2-3 us, InfiniBand 5-10 us)
LINK_LATENCY_US = 5.0


@dataclass(frozen=True)
class Peak:
    """A device's dense bf16 peak (TFLOP/s) and HBM bandwidth (GB/s), and GPCs (for clusters)."""

    tflops: float
    hbm_gbs: float
    gpcs: int
    source: str


PEAKS: dict[str, Peak] = {
    "a40": Peak(149.7, 696, 7, "NVIDIA A40 datasheet: 149.7 TFLOP/s bf16 dense, 696 GB/s GDDR6"),
    "a100": Peak(312, 2039, 7, "NVIDIA A100 SXM 80GB datasheet: 312 TFLOP/s bf16 dense, 2039 GB/s"),
    "h100": Peak(989, 3350, 8, "NVIDIA H100 SXM datasheet: 989 TFLOP/s bf16 dense, 3350 GB/s"),
    "h200": Peak(989, 4800, 8, "NVIDIA H200 SXM datasheet: 989 TFLOP/s bf16 dense, 4800 GB/s"),
    "mi250x": Peak(191.5, 1638, 1, "AMD MI250X datasheet, one GCD (half the module): 191.5 TFLOP/s bf16, 1638 GB/s"),
}


def peak(device: DeviceLimits) -> Peak | None:
    key = device.name.lower().replace("nvidia", "").strip()
    return PEAKS.get(key) or next((p for n, p in PEAKS.items() if n in key), None)


@dataclass(frozen=True)
class Moved:
    steps: tuple[Step, Step, Step]  # the middle ratio, then the two ends (for the interval)
    assumptions: tuple[str, ...]


def _clamp(fp, dst: DeviceLimits):
    return dataclasses.replace(
        fp, threads=min(fp.threads, dst.max_threads_per_block), regs=min(fp.regs, dst.max_regs_per_thread),
        static_smem=min(fp.static_smem, dst.smem_per_block_optin),
        dynamic_smem=min(fp.dynamic_smem, dst.smem_per_block_optin - min(fp.static_smem, dst.smem_per_block_optin)),
        cluster=min(fp.cluster, max(dst.max_cluster_size, 1)))


def to_device(step: Step, name: str) -> Moved:
    """The step on preset `name`."""
    src, dst = step.device, get_device(name)
    ps, pd = peak(src), peak(dst)
    if ps is None or pd is None:
        raise UsageError(f"--device {name}: no peak numbers for the {src.name if ps is None else dst.name} to move "
                         f"the step by (known: {', '.join(PEAKS)})")
    ratios = (ps.tflops / pd.tflops, ps.hbm_gbs / pd.hbm_gbs)
    clamped: list[str] = []

    def move(k: Kernel, ratio: float) -> Kernel:
        if k.footprint is None:
            return dataclasses.replace(k, alone_us=k.alone_us * ratios[1])
        fp = k.footprint
        grid = fp.grid
        if not k.comm and grid == alone_per_sm(src, fp, k.hint) * src.sm_count:
            grid = max(1, grid * dst.sm_count // src.sm_count)
        new = _clamp(dataclasses.replace(fp, grid=grid), dst)
        if new != dataclasses.replace(fp, grid=grid):
            clamped.append(k.name[:40])
        sms = None if k.sms is None else (min(k.sms[0], dst.sm_count - 1), min(k.sms[1], dst.sm_count))
        return dataclasses.replace(k, footprint=new, basis=None, alone_us=k.alone_us * (1 if k.comm else ratio),
                                   sms=sms)

    greatest = dst.stream_priority_range[1]
    prio = {s: greatest if p < 0 else p for s, p in step.priorities.items()}
    out = tuple(step.replace(device=dst, priorities=prio, kernels=tuple(move(k, r) for k in step.kernels))
                for r in (sum(ratios) / 2, min(ratios), max(ratios)))
    said = [f"predicted for {dst.name}, not measured: compute launches' times alone scaled by "
            f"{min(ratios):.2f}-{max(ratios):.2f} (peak bf16 FLOP/s and HBM bandwidth of {src.name} over {dst.name}; "
            f"{ps.source}; {pd.source}), the middle predicted",
            "persistent grids resized to its SMs; collectives at their captured time alone"]
    if clamped:
        said.append(f"{len(set(clamped))} kernel(s) exceed its per-block limits and were clamped to them "
                    f"(first: {clamped[0]})")
    return Moved(out, tuple(said))


def _allreduce_us(bytes_: float, busbw_gbs: float, world: int) -> float:
    bw = bytes_ * nccl.RING_FACTORS["allreduce"](world) / busbw_gbs / 1000  # bytes / (GB/s) = ns -> us
    ring = 2 * (world - 1) * LINK_LATENCY_US
    tree = 2 * math.ceil(math.log2(max(world, 2))) * LINK_LATENCY_US
    return bw + min(ring, tree)


def collectives(step: Step, capture_busbw: float, busbw: float, capture_world: int, world: int) -> tuple[Step, str]:
    """The step with each collective's time alone at `busbw` GB/s and `world` ranks, from the capture's: the
    captured time fixes the bytes moved (an all-reduce's cost model, inverted), the model gives the new time."""
    def scale(k: Kernel) -> Kernel:
        if not k.comm:
            return k
        lat = _allreduce_us(0, capture_busbw, capture_world)
        bytes_ = max(k.alone_us - lat, 0.0) * capture_busbw * 1000 / nccl.RING_FACTORS["allreduce"](capture_world)
        return dataclasses.replace(k, alone_us=max(_allreduce_us(bytes_, busbw, world), 1e-3))

    note = (f"predicted, not measured: collectives as all-reduces at {busbw:g} GB/s and {world} ranks, from "
            f"{capture_busbw:g} GB/s and {capture_world} ranks (ring and tree cost models, "
            f"{LINK_LATENCY_US:g} us a step)")
    return step.with_kernels(scale), note
