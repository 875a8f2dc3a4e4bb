"""Kernel footprints: the per-block resources a launch asks of an SM.

A footprint comes from a hand-written spec (the CLI), from a CUDA function or
kernel handle (attributes read through the driver), or from a profiler trace
event, whose args carry what the launch really used.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ccoverlap.util.errors import UsageError, check_range
from ccoverlap.model.limits import DeviceLimits
from ccoverlap.gpu import cuda_driver as cu


@dataclass(frozen=True)
class KernelFootprint:
    """Threads, registers and shared memory (bytes) of one block, plus grid and cluster."""

    threads: int
    regs: int
    static_smem: int = 0
    dynamic_smem: int = 0
    grid: int = 1  # blocks (CTAs) in the launch
    cluster: int = 1  # blocks per cluster
    name: str = ""

    @property
    def smem(self) -> int:
        return self.static_smem + self.dynamic_smem

    def padded(self, pad_bytes: int) -> KernelFootprint:
        return dataclasses.replace(self, dynamic_smem=self.dynamic_smem + pad_bytes)

    def validate(self, device: DeviceLimits, what: str = "kernel") -> KernelFootprint:
        """Raise a UsageError naming the first field outside `device`'s valid range."""
        check_range(f"{what} threads", self.threads, 1, device.max_threads_per_block)
        check_range(f"{what} regs", self.regs, 1, device.max_regs_per_thread)
        optin = device.smem_per_block_optin
        check_range(f"{what} static", self.static_smem, 0, optin, "bytes")
        check_range(f"{what} dynamic", self.dynamic_smem, 0, optin - self.static_smem,
                    f"bytes (opt-in max {optin} minus static)")
        check_range(f"{what} grid", self.grid, 1, 2**31 - 1)
        check_range(f"{what} cluster", self.cluster, 1, max(device.max_cluster_size, 1))
        return self

    @classmethod
    def from_spec(cls, spec: str, what: str = "kernel", base: KernelFootprint | None = None) -> KernelFootprint:
        """Parse 'threads=640,regs=96,static=22592,dynamic=80KiB,ctas=16,cluster=4'.

        Keys: threads, regs, static, dynamic, grid (alias ctas), cluster, name.
        Sizes accept a K/KiB suffix (x1024). Keys absent from the spec come
        from `base`; without a base, threads and regs are required.
        """
        fields = dataclasses.asdict(base) if base else {}
        given: set[str] = set()
        for part in filter(None, (p.strip() for p in spec.split(","))):
            key, sep, raw = part.partition("=")
            key = _ALIASES.get(key.strip().lower(), key.strip().lower())
            if not sep or key not in _SPEC_KEYS:
                raise UsageError(
                    f"{what} spec {spec!r}: {part!r} is not key=value with a key from {', '.join(_SPEC_KEYS)}"
                )
            if key in given:  # which one was meant is a guess (an alias counts: ctas is grid)
                raise UsageError(f"{what} spec {spec!r}: {key} given twice")
            given.add(key)
            fields[key] = raw.strip() if key == "name" else _parse_int(what, key, raw)
        for required in ("threads", "regs"):
            if required not in fields:
                raise UsageError(f"{what} spec {spec!r}: {required}= is required (e.g. threads=256,regs=32)")
        return cls(**fields)

    @classmethod
    def from_function(
        cls,
        handle: int,
        *,
        threads: int,
        dynamic_smem: int = 0,
        grid: int = 1,
        is_kernel: bool = False,
        device: int = 0,
        drv=None,
        name: str = "",
    ) -> KernelFootprint:
        """Footprint of a launch of a CUfunction (or CUkernel, as cudart passes).

        Registers, static shared memory and a required cluster width are
        properties of the compiled function; threads, dynamic shared memory
        and grid belong to the launch and are given.
        """
        drv = drv or cu.driver()
        if drv is None:
            raise UsageError("reading a kernel footprint needs a CUDA GPU and its driver")

        def attr(a: int) -> int:
            return drv.kernel_attribute(a, handle, device) if is_kernel else drv.function_attribute(a, handle)

        return cls(
            threads=threads,
            regs=attr(cu.FUNC_NUM_REGS),
            static_smem=attr(cu.FUNC_SHARED_SIZE_BYTES),
            dynamic_smem=dynamic_smem,
            grid=grid,
            cluster=max(attr(cu.FUNC_REQUIRED_CLUSTER_WIDTH), 1),
            name=name,
        )

    @classmethod
    def from_trace_event(cls, event: dict) -> KernelFootprint:
        """Footprint of a Kineto (torch.profiler) kernel event.

        Kineto reports one 'shared memory' figure per launch (static plus
        dynamic), which lands in `dynamic_smem`: occupancy depends only on the sum.
        """
        args = event.get("args") or {}
        try:
            block = _dims(args["block"])
            grid = _dims(args["grid"])
            return cls(
                threads=block,
                regs=int(args["registers per thread"]),
                dynamic_smem=int(args.get("shared memory", 0)),
                grid=grid,
                name=str(event.get("name", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(
                f"trace event {event.get('name', '?')!r} lacks kernel args "
                f"('block', 'grid', 'registers per thread', 'shared memory'): {exc}"
            ) from None


_SPEC_KEYS = ("threads", "regs", "static_smem", "dynamic_smem", "grid", "cluster", "name")
_ALIASES = {
    "static": "static_smem", "smem": "static_smem", "dynamic": "dynamic_smem", "dyn": "dynamic_smem",
    "ctas": "grid", "blocks": "grid", "registers": "regs",
}
_INT = re.compile(r"^\s*(-?\d+)\s*(k|kib|kb)?\s*$", re.IGNORECASE)


def _parse_int(what: str, key: str, raw: str) -> int:
    match = _INT.match(raw)
    if not match:
        raise UsageError(f"{what} {key}={raw.strip()!r} is not a whole number (bytes may end in K or KiB)")
    return int(match.group(1)) * (1024 if match.group(2) else 1)


def _dims(value) -> int:
    """Product of a [x, y, z] launch dimension as Kineto writes it."""
    total = 1
    for v in value if isinstance(value, (list, tuple)) else [value]:
        total *= int(v)
    return total
