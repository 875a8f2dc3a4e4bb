"""Time every strategy on one GPU with CUDA events: warm-up, repetitions, L2 flushed outside the span.

A repetition records four events (start, compute end, communication start and end) on two streams, so
it keeps its own events; the summary of the samples is ccoverlap.util.timing's, as everywhere.
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from ccoverlap.gpu import cuda_driver as cu
from ccoverlap.lab import kernels
from ccoverlap.control import levers
from ccoverlap.util import profiling
from ccoverlap.util.errors import UsageError
from ccoverlap.control.interposer import preloaded, set_policy
from ccoverlap.lab import metrics, workloads
from ccoverlap.lab.config import LabConfig
from ccoverlap.model.limits import DeviceLimits
from ccoverlap.model import nccl
from ccoverlap.model.planner import plan
from ccoverlap.util.timing import summary


@dataclass
class Setup:
    """How one strategy runs in the lab: what its levers change for this case.

    Each lever of the registry has its lab mechanism in LAB_SETUP, and only there; levers without one are
    refused by `levers.Lever.applies(host, "lab")` before a Setup is made."""

    concurrent: bool = True  # compute and comm on two streams (no-overlap: one stream, compute first)
    priority: bool = False  # comm on the device's greatest-priority stream
    comm: workloads.CommShape | None = None  # threads, CTAs, cluster of the proxy launch (None: the proxy's)
    pad: int = 0  # bytes added to each compute block (shape, custom kernels)
    interposed: bool = False  # shape: library kernels padded by the preloaded interposer
    sm_carveout: int | None = None  # cuBLAS leaves this many SMs free
    green_sms: int | None = None  # compute confined to a green context without this many SMs
    hint: int | None = None  # carveout-hint: the compute kernels' preferred carveout, percent
    comm_hint: int | None = None  # comm-carveout-hint: the comm proxy's preferred carveout, percent


class Lab:
    """Kernels, streams and buffers for one GPU; `run` measures every case, strategy and order."""

    def __init__(self, cfg: LabConfig, device: DeviceLimits):
        if cu.driver() is None or not torch.cuda.is_available():
            raise UsageError("the lab needs a CUDA GPU (use ccoverlap plan to reason without one)")
        torch.cuda.init()
        torch.manual_seed(0)
        self.cfg, self.device = cfg, device
        drv = cu.driver()
        least, greatest = device.stream_priority_range
        self.compute_stream = workloads.Stream.raw(drv.create_stream(least))
        self.comm_streams = {False: workloads.Stream.raw(drv.create_stream(least)),
                             True: workloads.Stream.raw(drv.create_stream(greatest))}
        self.flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
        self.kernels = kernels.build_compute(device.arch, cfg.fma_regs)
        self.host = levers.Host.detect()
        self._green: dict[int, tuple[object, workloads.Stream]] = {}
        self.timelines: dict[tuple, dict] = {}

    # --- building blocks -------------------------------------------------------------------------
    def phase(self, name: str) -> workloads.Phase:
        c, k = self.cfg, self.kernels
        return {
            "fma": lambda: workloads.fma(k["fma_kernel"], self.device.sm_count, c.fma_iters),
            "sparse": lambda: workloads.sparse(k["fma_kernel"], self.device.sm_count, c.sparse_ms),
            "elementwise": lambda: workloads.elementwise(k["triad_kernel"], c.elementwise_gib, c.elementwise_launches),
            "gemm": lambda: workloads.gemm(c.gemm_n, c.gemm_count),
            "attention": lambda: workloads.attention(*c.attention_shape),
            "transformer": lambda: workloads.transformer(*c.transformer_shape),
        }[name]()

    def proxy(self, name: str) -> workloads.CommProxy:
        c = self.cfg
        nbytes, paced = c.comm_mib * 2**20, c.comm_busbw > 0
        kernel_name = "comm_paced" if paced else "comm_proxy"
        if name == "light":
            kernel = kernels.build_comm_proxy(self.device.arch, 40, 16, name=kernel_name)
            shape = workloads.CommShape(512, 2 * c.comm_ctas, 1)
            return workloads.CommProxy(kernel, shape, name, 16 * 1024, nbytes, c.comm_busbw)
        # NCCL_NTHREADS acts by protocol: the AllReduce seen was ring LL; the 640-thread default, as Simple
        if name == "nccl-allreduce":
            fp, protocol = nccl.OBSERVED_LAUNCHES["allreduce"], nccl.PROTOCOLS["allreduce"]
        else:
            fp, protocol = nccl.nccl_footprint(arch=self.device.arch, ctas=c.comm_ctas).footprint, "SIMPLE"
        kernel = kernels.build_comm_proxy(self.device.arch, fp.regs, fp.static_smem, name=kernel_name)
        shape = workloads.CommShape(fp.threads, fp.grid, fp.cluster)
        return workloads.CommProxy(kernel, shape, name, fp.dynamic_smem, nbytes, c.comm_busbw, protocol)

    def green_stream(self, comm_sms: int) -> workloads.Stream:
        """A stream of a green context holding all SMs but `comm_sms`: compute is confined there, and
        comm (on an ordinary stream) finds the rest free. Two green contexts would not be disjoint:
        each GreenContext.create splits the whole device anew."""
        if comm_sms not in self._green:
            from torch.cuda.green_contexts import GreenContext

            gc = GreenContext.create(num_sms=self.device.sm_count - comm_sms, device_id=0)
            if hasattr(gc, "Stream"):
                stream = workloads.Stream.wrap(gc.Stream())
            else:
                gc.set_context()
                try:
                    stream = workloads.Stream.wrap(torch.cuda.Stream())
                finally:
                    gc.pop_context()
            self._green[comm_sms] = (gc, stream)  # a collected GreenContext destroys its streams' context
        return self._green[comm_sms][1]

    # --- one timed repetition -------------------------------------------------------------------
    def _rep(self, phase, proxy, streams, setup: Setup, order):
        """One run: (total, comm done, compute) in ms; either side may be None (alone runs)."""
        sc, sm = streams
        torch.cuda.synchronize()
        self.flush.zero_()  # evict L2 outside the timed span
        torch.cuda.synchronize()
        start, compute_end, comm_start, comm_end = (torch.cuda.Event(enable_timing=True) for _ in range(4))
        start.record(sc.torch)
        comm_on = sm if setup.concurrent else sc
        if setup.concurrent:
            sm.torch.wait_event(start)

        def compute():
            if setup.sm_carveout is not None:
                torch._C._set_sm_carveout_experimental(setup.sm_carveout)
            if setup.interposed:  # the library's own launches, padded by the interposer's plan
                set_policy("auto")
            phase.enqueue(sc, setup.pad)
            if setup.interposed:
                set_policy("off")
            if setup.sm_carveout is not None:
                torch._C._set_sm_carveout_experimental(None)
            compute_end.record(sc.torch)

        def comm():
            if order == "delayed" and setup.concurrent:
                self.kernels["sleep_kernel"].launch(1, 32, sm.handle, [_ns(self.cfg.delay_ms)])
            comm_start.record(comm_on.torch)
            proxy.enqueue(comm_on, setup.comm)
            comm_end.record(comm_on.torch)

        steps = [s for s, present in ((compute, phase), (comm, proxy)) if present]
        for step in reversed(steps) if order == "before" else steps:
            step()
        torch.cuda.synchronize()
        t_compute = start.elapsed_time(compute_end) if phase else 0.0
        t_comm_end = start.elapsed_time(comm_end) if proxy else 0.0
        t_comm = comm_start.elapsed_time(comm_end) if proxy else 0.0
        return max(t_compute, t_comm_end), t_comm, t_compute

    def _measure(self, fn: Callable[[], tuple[float, float, float]]) -> dict[str, list[float]]:
        for _ in range(self.cfg.warmup):
            fn()
        runs = [fn() for _ in range(self.cfg.reps)]
        return {"total_ms": [r[0] for r in runs], "comm_done_ms": [r[1] for r in runs],
                "compute_ms": [r[2] for r in runs]}

    # --- a whole case -------------------------------------------------------------------------------
    def run_case(self, compute: str, comm: str, progress: Callable[[], None] = lambda: None) -> list[dict]:
        phase, proxy = self.phase(compute), self.proxy(comm)
        base = (self.compute_stream, self.comm_streams[False])
        alone_c = self._measure(lambda: self._rep(phase, None, base, Setup(), "with"))
        reference = phase.snapshot()
        alone_m = self._measure(lambda: self._rep(None, proxy, base, Setup(), "with"))
        seq = self._measure(lambda: self._rep(phase, proxy, base, Setup(concurrent=False), "with"))
        case = {
            "compute": compute, "comm": comm,
            "compute_alone_ms": summary(alone_c["compute_ms"])["median"],
            "comm_alone_ms": summary(alone_m["comm_done_ms"])["median"],
            "sequential_ms": summary(seq["total_ms"])["median"],
        }
        base_info = {"levers": {}, "comm_threads": proxy.shape.threads, "comm_ctas": proxy.shape.ctas,
                     "comm_cluster": proxy.shape.cluster, "pad_bytes": 0, "comm_priority": False}
        measured = {("compute-alone", "-"): {"info": base_info, "samples": alone_c},
                    ("comm-alone", "-"): {"info": base_info, "samples": alone_m}}
        for name in self.cfg.strategies:
            strategy = levers.strategy(name)
            for order in ("with",) if strategy.no_overlap else self.cfg.orders:
                measured[(strategy.name, order)] = self._strategy(
                    phase, proxy, strategy, order, reference, seq if strategy.no_overlap else None)
                progress()
        rows = metrics.case_rows(case, measured)
        return [dict(case, **row) for row in rows]

    def _setup(self, phase, proxy, strategy: levers.Strategy, info: dict) -> Setup | str:
        """The lab's mechanism for each of the strategy's levers (LAB_SETUP), or why it cannot run here."""
        if reason := strategy.not_applicable(self.host, "lab"):
            return f"n/a: {reason}"
        v = strategy.values
        env = strategy.setting().env  # NCCL's knobs, read as NCCL 2.28.9 reads them (ccoverlap.model.nccl)
        knobs = nccl.Knobs.from_env(env)
        ctas = knobs.channels(proxy.shape.ctas)
        threads = knobs.threads(proxy.protocol, proxy.shape.threads) if knobs.nthreads else proxy.shape.threads
        cluster = knobs.cluster if "NCCL_CGA_CLUSTER_SIZE" in env else proxy.shape.cluster
        shape = workloads.CommShape(threads, ctas, nccl.cluster_dim(cluster, ctas))
        setup = Setup(concurrent=not strategy.no_overlap, comm=shape)
        info |= {"comm_threads": shape.threads, "comm_ctas": shape.ctas, "comm_cluster": shape.cluster,
                 "comm_protocol": proxy.protocol,
                 "comm_priority": setup.priority}
        cell = Cell(self, phase, proxy, setup, info, levers.comm_sms(shape.ctas, self.device.sm_count))
        for name, mechanism in LAB_SETUP.items():  # in the table's order: the first lever that cannot run says why
            if name in v and (why := mechanism(cell, v[name])):  # (not_applicable refused the NotApplicable ones)
                return why
        return setup

    def _strategy(self, phase, proxy, strategy: levers.Strategy, order, reference, samples=None) -> dict:
        info = {"levers": strategy.values, "pad_bytes": 0}
        setup = self._setup(phase, proxy, strategy, info)
        if isinstance(setup, str):
            return {"info": info, "status": setup}
        streams = (self.compute_stream, self.comm_streams[setup.priority])
        if setup.green_sms is not None:
            try:
                streams = (self.green_stream(setup.green_sms), streams[1])
            except (RuntimeError, AttributeError, TypeError) as exc:
                return {"info": info, "status": f"n/a: green contexts failed: {exc}"}
        if samples is None:
            phase.hint(setup.hint)
            proxy.kernel.prefer_carveout(setup.comm_hint)
            try:
                samples = self._measure(lambda: self._rep(phase, proxy, streams, setup, order))
                if self.cfg.trace_dir:  # the cell as the doctor sees it: known waits to check it against
                    where = Path(self.cfg.trace_dir, f"{phase.name}+{proxy.name}", f"{strategy.name}-{order}")
                    profiling.record(lambda: self._rep(phase, proxy, streams, setup, order),
                                     where / "rank0_trace.json.gz", cuda=True, warmup=1, active=2)
            finally:
                phase.hint(None)
                proxy.kernel.prefer_carveout(None)
        info["outputs_match"] = _same(reference, phase.snapshot(), phase.exact)
        info["comm_wrong"] = proxy.wrong()
        timeline = self.timelines[(phase.name, proxy.name, strategy.name, order)] = _timeline(phase, proxy)
        info["comm_timeline"] = timeline["comm"]
        return {"info": info, "samples": samples}


@dataclass
class Cell:
    """What a lever's lab set-up reads and fills: the lab, the case's compute phase and proxy, the Setup, the
    row's info, and the SMs communication needs on its own (`auto`)."""

    lab: Lab
    phase: workloads.Phase
    proxy: workloads.CommProxy
    setup: Setup
    info: dict
    auto: int


def _priority(c: Cell, _value: str) -> None:
    c.setup.priority = c.info["comm_priority"] = True


def _nccl_knob(_c: Cell, _value: str) -> None:
    """NCCL's variables (CTAs, threads, cluster) shape the proxy together: Setup.comm, read before the table."""


def _sm_carveout(c: Cell, value: str) -> str | None:
    if not c.phase.uses_cublas:
        return "n/a: SM carveout applies to cuBLAS matmuls only"
    c.setup.sm_carveout = c.info["carveout_sms"] = c.auto if value == "auto" else int(value)
    return None


def _green(c: Cell, value: str) -> None:
    c.setup.green_sms = c.info["green_comm_sms"] = c.auto if value == "auto" else int(value)


def _carveout_hint(c: Cell, value: str) -> str | None:
    if not c.phase.kernels:
        return "n/a: library kernels get the hint through the interposer (ccoverlap run --carveout)"
    c.setup.hint = c.info["carveout_hint"] = int(value)
    return None


def _comm_carveout_hint(c: Cell, value: str) -> None:
    c.setup.comm_hint = c.info["comm_carveout_hint"] = int(value)


def _shape(c: Cell, _value: str) -> str | None:
    phase, proxy, setup, info = c.phase, c.proxy, c.setup, c.info
    if phase.footprint is None:
        if not preloaded():
            return ("n/a: library kernels are shaped by the launch interposer, which is not preloaded "
                    "into this process")
        setup.interposed = True
        info["shaped_by"] = "interposer: auto plan per library kernel against the proxy it saw, drain by grid"
    else:
        p = plan(c.lab.device, phase.footprint, proxy.footprint(setup.comm), drain=None)
        if not p.feasible:
            return f"infeasible: {p.binding.value} bind ({p.suggestions[-1]})"
        setup.pad = p.pad_bytes
        info |= {"pad_bytes": p.pad_bytes, "compute_blocks_per_sm": p.compute_blocks_after, "drain": p.drain}
    return None


_REFUSED = levers.NotApplicable("refused in the lab before a Setup is made (its Lever.not_in['lab'] says why)")
#: lever -> its set-up in the lab: fills the cell's Setup and info, or says why the lever cannot run in this case;
#: applied in this order (the first that cannot run says why)
LAB_SETUP: Mapping[str, Callable[[Cell, str], str | None] | levers.NotApplicable] = levers.mechanisms("lab set-up", {
    "priority": _priority, "nccl-cluster": _nccl_knob, "nccl-ctas": _nccl_knob, "nccl-threads": _nccl_knob,
    "sm-carveout": _sm_carveout, "green": _green, "carveout-hint": _carveout_hint,
    "comm-carveout-hint": _comm_carveout_hint, "shape": _shape,
    "nccl-cta-policy": _REFUSED, "max-connections": _REFUSED,
})
if _astray := [lv.name for lv in levers.LEVERS
               if ("lab" in lv.not_in) != isinstance(LAB_SETUP[lv.name], levers.NotApplicable)]:
    raise TypeError("LAB_SETUP: NotApplicable exactly where a lever's not_in has 'lab', "
                    f"not so for {', '.join(_astray)}")


def _ns(ms: float) -> ctypes.c_ulonglong:
    return ctypes.c_ulonglong(int(ms * 1e6))


def _same(ref: list[torch.Tensor], got: list[torch.Tensor], exact: bool) -> bool:
    if exact:
        return all(torch.equal(a, b) for a, b in zip(ref, got))
    return all(
        float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)) < 1e-2 for a, b in zip(ref, got)
    )


def _timeline(phase: workloads.Phase, proxy: workloads.CommProxy) -> dict:
    """Block residency of the last repetition, in ms from the first block's start: (start, end, sm) rows."""
    comm = proxy.stamps[:proxy.ctas].cpu()
    compute = phase.stamps.cpu() if phase.stamps is not None else None
    starts = [int(comm[:, 0].min())] + ([int(compute[:, 0].min())] if compute is not None else [])
    t0 = min(starts)

    def rows(t):
        return [[(int(s) - t0) / 1e6, (int(e) - t0) / 1e6, int(sm)] for s, e, sm in t.tolist()]

    return {"comm": rows(comm), "compute": rows(compute) if compute is not None else []}


def run(cfg: LabConfig, device: DeviceLimits,
        progress: Callable[[str], None] = lambda _: None) -> tuple[list[dict], dict]:
    """Measure every (compute, comm) case; rows and the block timelines (for plots)."""
    lab = Lab(cfg.validate(), device)
    rows = []
    for compute in cfg.computes:
        for comm in cfg.comms:
            rows += lab.run_case(compute, comm, lambda: progress(f"{compute} + {comm}"))
    return rows, lab.timelines
