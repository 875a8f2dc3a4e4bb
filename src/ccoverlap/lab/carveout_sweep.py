"""The shared-memory carveout in the lab: when does a kernel start on SMs that another one holds?

Each case runs a resident kernel (one block per SM, or two) that spins on %globaltimer for ~2 ms,
then launches, on a second stream, a 16-block "comm" kernel, and records when the comm kernel's
first block started: while the resident ran ("starts") or only once it drained ("waits"). The
resident's and the comm kernel's shared memory, threads, preferred carveout (hint) and
max-dynamic attribute vary; every case is also predicted by `occupancy.beside`, and the table
(`ccoverlap occupancy --validate-carveout --out F`, committed as bench/results/carveout-*.json)
is re-checked on the CPU by tests/test_carveout.py. NVRTC and the driver API through ctypes.

Every repetition starts from idle SMs left in a known configuration by a primer kernel (its
smallest, "min", or largest, "max"), since an SM changes configuration only while idle; the
repetitions of a case are spread over shuffled passes, and each records the case measured before it.
"""
from __future__ import annotations

import ctypes
import dataclasses
import random
import statistics
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import product

from ccoverlap.gpu import cuda_driver as cu
from ccoverlap.util.errors import UsageError
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.lab.kernels import SOURCE
from ccoverlap.model.limits import DeviceLimits, read_live
from ccoverlap.gpu.nvrtc import compile_cubin
from ccoverlap.model.occupancy import Beside, beside

KB = 1024
RAISED = 200 * KB  # the max-dynamic attribute, when raised
COMM_GRID = 16
PRIMER_THREADS = 32
PRIMER_HINT = {"min": 0, "max": 100}  # 0-byte blocks: hint 0 leaves the smallest configuration, 100 the largest
COMM_SPIN_US = 20  # the comm and primer kernels' blocks: long enough to land one per SM
MAX_ATTEMPTS = 5  # a repetition whose comm launch left the host late is run again

# The axes: the main ones cross fully; the others vary one at a time over that cross (`cases`).
RESIDENT_SMEM_KB = (0, 1, 8, 16, 32, 64, 100)
RESIDENT_HINTS = (None, 0, 25, 50, 75, 100)
RESIDENT_THREADS = (128, 256, 1024)
COMM_SMEM_KB = (0, 8, 24, 48, 64, 104, 120, 160)
COMM_THREADS = (256, 640)
COMM_HINTS = (None, 100)
RESIDENT_PER_SM = (1, 2)


def launch_attr(smem: int) -> int | None:
    """The max-dynamic attribute a launch of `smem` dynamic bytes needs: raised past the default only."""
    return RAISED if smem > cu.DEFAULT_SMEM_PER_BLOCK else None


@dataclass(frozen=True)
class Case:
    """One row's inputs: shared memory in bytes, hints in percent (None: not set), attributes in
    bytes (None: not raised)."""

    resident_smem: int
    resident_attr: int | None
    resident_hint: int | None
    resident_threads: int
    comm_smem: int
    comm_threads: int
    comm_hint: int | None
    comm_attr: int | None
    resident_per_sm: int = 1  # the resident's grid is SMs x this
    primer: str = "min"  # the configuration the SMs were left in: "min" or "max"

    def kernel(self, role: str) -> str:
        """The kernel this case launches as `role` ('resident', 'comm' or 'primer')."""
        if role == "primer":
            return kernel_name(role, PRIMER_HINT[self.primer], None)
        return kernel_name(role, getattr(self, f"{role}_hint"), getattr(self, f"{role}_attr"))


def kernel_name(role: str, hint: int | None, attr: int | None) -> str:
    return f"carve_{role}_h{'none' if hint is None else hint}_a{'none' if attr is None else attr}"


def _main_cross() -> list[Case]:
    return [
        Case(rs * KB, launch_attr(rs * KB), hint, rt, cs * KB, ct, None, launch_attr(cs * KB))
        for rs, hint, rt, cs, ct in product(RESIDENT_SMEM_KB, RESIDENT_HINTS, RESIDENT_THREADS, COMM_SMEM_KB,
                                            COMM_THREADS)
    ]


def cases(quick: bool = False) -> list[Case]:
    """The sweep: the full cross of the main axes, then each other axis over that cross.

    Other axes: the resident's attribute raised where its launch did not need it, the comm
    kernel's hint, the comm kernel's attribute raised, SMs primed to the largest configuration
    (128-thread resident, 256-thread comm), and two resident blocks per SM (256 threads, where
    two fit in any configuration the model allows). `quick`: the worked check of
    docs/occupancy.md and the resident's hint at none, 50 and 100, for a smoke test.
    """
    if quick:
        worked = [(8, None, cs) for cs in COMM_SMEM_KB] + [(0, h, cs) for h in (None, 50, 100) for cs in (8, 120)]
        return [Case(rs * KB, None, h, 128, cs * KB, 256, None, launch_attr(cs * KB)) for rs, h, cs in worked]
    main = _main_cross()
    return (
        main
        + [dataclasses.replace(c, resident_attr=RAISED) for c in main if c.resident_attr is None]
        + [dataclasses.replace(c, comm_hint=h) for h in COMM_HINTS[1:] for c in main]
        + [dataclasses.replace(c, comm_attr=RAISED) for c in main if c.comm_attr is None]
        + [dataclasses.replace(c, primer="max") for c in main if c.resident_threads == 128 and c.comm_threads == 256]
        + [
            dataclasses.replace(c, resident_per_sm=k) for k in RESIDENT_PER_SM[1:] for c in main
            if c.resident_threads == 256 and c.comm_threads == 256 and c.resident_hint in (None, 100)
            and c.resident_smem in (0, 8 * KB, 32 * KB)
        ]
    )


@dataclass(frozen=True)
class SweepKernel:
    handle: int
    regs: int
    static_smem: int
    carveout: int = -1  # the hint read back from the driver (-1: none)
    max_dynamic_smem: int = 0  # the attribute read back


def footprints(dev: DeviceLimits, case: Case, resident: SweepKernel,
               comm: SweepKernel) -> tuple[KernelFootprint, KernelFootprint]:
    return (
        KernelFootprint(case.resident_threads, resident.regs, resident.static_smem, case.resident_smem,
                        grid=dev.sm_count * case.resident_per_sm),
        KernelFootprint(case.comm_threads, comm.regs, comm.static_smem, case.comm_smem, grid=COMM_GRID),
    )


def predict(dev: DeviceLimits, case: Case, resident: SweepKernel, comm: SweepKernel) -> Beside:
    """The model's answer for `case`: occupancy.beside with the case's hints and attributes."""
    r, c = footprints(dev, case, resident, comm)
    return beside(dev, r, c, resident_hint=case.resident_hint, resident_max_dynamic_smem=case.resident_attr,
                  comm_hint=case.comm_hint, comm_max_dynamic_smem=case.comm_attr)


@dataclass(frozen=True)
class Rep:
    """One repetition: did the comm kernel start while the resident ran, and the evidence."""

    starts: bool
    delay_us: float  # the comm kernel's first block start minus the resident's first
    resident_sms: int  # SMs the resident's blocks ran on
    spread_us: float  # last minus first resident block start (all resident at once: a few us)


def classify(resident: list[tuple[int, int, int]], comm: list[tuple[int, int, int]], margin_ns: int) -> Rep:
    """Stamps (start ns, end ns, SM) of every block to a repetition's outcome.

    The comm kernel "starts" when its first block started more than `margin_ns` before the first
    resident block ended: a comm kernel that waits starts only as SMs drain.
    """
    if any(s[0] == 0 for s in resident + comm):
        raise RuntimeError("a block did not stamp its start: the launch failed or the buffer is short")
    first = min(s[0] for s in resident)
    comm_start = min(s[0] for s in comm)
    return Rep(
        starts=comm_start < min(s[1] for s in resident) - margin_ns,
        delay_us=(comm_start - first) / 1000,
        resident_sms=len({s[2] for s in resident}),
        spread_us=(max(s[0] for s in resident) - first) / 1000,
    )


@dataclass(frozen=True)
class Settings:
    reps: int = 3
    spin_us: int = 2000  # each resident block spins this long
    gap_us: int = 100  # host wait between the resident's launch and the comm kernel's
    margin_us: int = 500
    seed: int = 0

    def estimate_s(self, n_cases: int) -> float:
        """Rough run time: each repetition takes the resident's spin plus ~0.5 ms of launches and copies."""
        return n_cases * self.reps * (self.spin_us + 500) / 1e6


def build(drv, dev: DeviceLimits, ordinal: int, all_cases: list[Case], compile=compile_cubin) -> dict[str, SweepKernel]:
    """Compile one kernel per name the cases use, and set each one's hint and attribute once."""
    wanted = {c.kernel(role): (role, c) for c in all_cases for role in ("resident", "comm", "primer")}
    source = SOURCE + "".join(f"SPIN_KERNEL({name})\n" for name in sorted(wanted))
    handles = drv.load_kernels(compile(source, dev.arch), sorted(wanted))
    device = drv.device(ordinal)
    kernels = {}
    for name, (role, case) in wanted.items():
        handle = handles[name]
        hint = PRIMER_HINT[case.primer] if role == "primer" else getattr(case, f"{role}_hint")
        attr = None if role == "primer" else getattr(case, f"{role}_attr")
        if hint is not None:
            drv.set_kernel_attribute(cu.FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT, handle, hint, device)
        if attr is not None:
            drv.set_kernel_attribute(cu.FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, handle, attr, device)
        kernels[name] = SweepKernel(handle, *(drv.kernel_attribute(a, handle, device) for a in (
            cu.FUNC_NUM_REGS, cu.FUNC_SHARED_SIZE_BYTES, cu.FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT,
            cu.FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        )))
    return kernels


class Bench:
    """Streams, a stamp buffer and the kernels on one GPU; `rep` runs one repetition of a case.

    The buffer holds 24 bytes (start, end, SM) per block: the resident's (up to two per SM), then
    the comm kernel's, then the primer's, which is never read.
    """

    def __init__(self, drv, dev: DeviceLimits, kernels: dict[str, SweepKernel], settings: Settings):
        self.drv, self.dev, self.kernels, self.settings = drv, dev, kernels, settings
        least = dev.stream_priority_range[0]
        self.streams = (drv.create_stream(least), drv.create_stream(least))
        self.comm_at = dev.sm_count * max(RESIDENT_PER_SM)
        self.primer_at = self.comm_at + COMM_GRID
        self.nbytes = (self.primer_at + dev.sm_count) * 24
        self.buf = drv.alloc(self.nbytes)

    def launch(self, name: str, grid: int, threads: int, smem: int, stream: int, at_block: int, spin_us: int):
        args = [ctypes.c_uint64(self.buf + at_block * 24), ctypes.c_uint64(spin_us * 1000)]
        self.drv.launch(self.kernels[name].handle, grid, threads, smem, stream, args)

    def rep(self, case: Case) -> Rep:
        drv, s = self.drv, self.settings
        grid = self.dev.sm_count * case.resident_per_sm
        for _ in range(MAX_ATTEMPTS):
            drv.zero(self.buf, self.nbytes)
            self.launch(case.kernel("primer"), self.dev.sm_count, PRIMER_THREADS, 0, self.streams[0], self.primer_at,
                        COMM_SPIN_US)
            drv.synchronize()  # the SMs are idle, in the primer's configuration
            t0 = time.perf_counter()
            self.launch(case.kernel("resident"), grid, case.resident_threads, case.resident_smem, self.streams[0], 0,
                        s.spin_us)
            while time.perf_counter() - t0 < s.gap_us / 1e6:
                pass
            self.launch(case.kernel("comm"), COMM_GRID, case.comm_threads, case.comm_smem, self.streams[1],
                        self.comm_at, COMM_SPIN_US)
            late = time.perf_counter() - t0 > (s.spin_us - s.margin_us) / 2e6
            drv.synchronize()
            if not late:
                break
        else:
            raise RuntimeError(f"the comm launch left the host late {MAX_ATTEMPTS} times: is the host loaded?")
        raw = struct.unpack(f"<{3 * self.primer_at}Q", drv.copy_to_host(self.buf, self.primer_at * 24))
        stamps = [raw[i:i + 3] for i in range(0, len(raw), 3)]
        return classify(stamps[:grid], stamps[self.comm_at:], s.margin_us * 1000)


@dataclass(frozen=True)
class Row:
    case: Case
    resident: SweepKernel
    comm: SweepKernel
    reps: tuple[Rep, ...]
    prev: tuple[int | None, ...]  # the case measured just before each repetition (index into the table)
    model: Beside

    @property
    def outcome(self) -> str:
        starts = sum(r.starts for r in self.reps)
        return "starts" if 2 * starts > len(self.reps) else "waits"

    @property
    def consistent(self) -> bool:
        return len({r.starts for r in self.reps}) == 1

    @property
    def agree(self) -> bool:
        return ("starts" if self.model.fits else "waits") == self.outcome

    def flat(self) -> dict:
        """The table's row: inputs, the kernels as compiled, what was measured, what the model says."""
        return dataclasses.asdict(self.case) | {
            "resident_regs": self.resident.regs, "resident_static_smem": self.resident.static_smem,
            "comm_regs": self.comm.regs, "comm_static_smem": self.comm.static_smem,
            "outcome": self.outcome, "consistent": self.consistent,
            "per_rep": "".join("S" if r.starts else "W" for r in self.reps),
            "delay_us": round(statistics.median(r.delay_us for r in self.reps), 1),
            "resident_sms": min(r.resident_sms for r in self.reps),
            "spread_us": round(max(r.spread_us for r in self.reps), 1),
            "prev": list(self.prev),
            "model": "starts" if self.model.fits else "waits", "blocking": self.model.blocking,
            "config_kb": None if self.model.config is None else self.model.config // KB,
            "comm_needs_kb": None if self.model.comm_needs is None else self.model.comm_needs // KB,
            "agree": self.agree,
        }


def unflat(row: dict) -> tuple[Case, SweepKernel, SweepKernel]:
    """A table row's case and kernels, to predict it again (tests/test_carveout.py)."""
    case = Case(**{f.name: row[f.name] for f in dataclasses.fields(Case)})
    return (case, SweepKernel(0, row["resident_regs"], row["resident_static_smem"]),
            SweepKernel(0, row["comm_regs"], row["comm_static_smem"]))


def sweep(
    all_cases: list[Case],
    settings: Settings = Settings(),
    ordinal: int = 0,
    progress: Callable[[int, int], None] | None = None,
    drv=None,
    compile=compile_cubin,
) -> tuple[DeviceLimits, list[Row]]:
    """Measure every case `settings.reps` times, in shuffled passes, on CUDA device `ordinal`."""
    drv = drv or cu.driver()
    if drv is None:
        raise UsageError("--validate-carveout needs a CUDA GPU")
    dev = read_live(ordinal, drv)
    drv.use_primary_context(drv.device(ordinal))
    kernels = build(drv, dev, ordinal, all_cases, compile)
    bench = Bench(drv, dev, kernels, settings)
    for name in kernels:  # load every kernel before timing: a first launch loads its module
        bench.launch(name, 1, PRIMER_THREADS, 0, bench.streams[0], 0, 1)
    drv.synchronize()
    reps: list[list[Rep]] = [[] for _ in all_cases]
    prev: list[list[int | None]] = [[] for _ in all_cases]
    rng, last = random.Random(settings.seed), None
    for p in range(settings.reps):
        order = list(range(len(all_cases)))
        rng.shuffle(order)
        for n, i in enumerate(order):
            reps[i].append(bench.rep(all_cases[i]))
            prev[i].append(last)
            last = i
            if progress:
                progress(p * len(order) + n + 1, settings.reps * len(order))
    drv.free(bench.buf)
    rows = []
    for i, case in enumerate(all_cases):
        resident, comm = kernels[case.kernel("resident")], kernels[case.kernel("comm")]
        rows.append(Row(case, resident, comm, tuple(reps[i]), tuple(prev[i]), predict(dev, case, resident, comm)))
    return dev, rows


def report(dev: DeviceLimits, rows: list[Row], provenance: dict, settings: Settings) -> dict:
    flat = [r.flat() for r in rows]
    kernels = {r.case.kernel(role): getattr(r, role) for r in rows for role in ("resident", "comm")}
    return {
        "provenance": provenance,
        "device_limits": dev.to_dict(),
        "settings": dataclasses.asdict(settings) | {"comm_grid": COMM_GRID, "comm_spin_us": COMM_SPIN_US,
                                                    "primer_threads": PRIMER_THREADS, "raised_attr": RAISED},
        "kernels": {name: dataclasses.asdict(k) for name, k in sorted(kernels.items())},
        "rows_total": len(rows),
        "rows_agree": sum(r.agree for r in rows),
        "rows_consistent": sum(r.consistent for r in rows),
        "columns": list(flat[0]) if flat else [],
        "rows": [list(f.values()) for f in flat],
    }


def summary(dev: DeviceLimits, rows: list[Row], limit: int = 60) -> list[str]:
    """Rows, agreements, and every disagreeing or inconsistent row (the first `limit`)."""
    bad = [r for r in rows if not (r.agree and r.consistent)]
    lines = [
        f"{dev.name}: {len(rows)} cases; the model agrees on {sum(r.agree for r in rows)}, "
        f"{sum(r.consistent for r in rows)} consistent over repetitions",
    ]
    for r in bad[:limit]:
        f = r.flat()
        lines.append(
            f"  {'disagrees' if not r.agree else 'inconsistent'}: resident {f['resident_threads']} thr "
            f"{f['resident_smem'] // KB} KB hint {f['resident_hint']} attr {f['resident_attr']} "
            f"x{f['resident_per_sm']} | "
            f"comm {f['comm_threads']} thr {f['comm_smem'] // KB} KB hint {f['comm_hint']} attr {f['comm_attr']} | "
            f"primer {f['primer']}: measured {f['per_rep']} ({f['delay_us']} us), model {f['model']} "
            f"({f['blocking']}; config {f['config_kb']} KB, comm needs {f['comm_needs_kb']} KB)"
        )
    if len(bad) > limit:
        lines.append(f"  ... and {len(bad) - limit} more")
    return lines
