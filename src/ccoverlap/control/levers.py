"""Every runtime control ccoverlap can turn, as data: one table, read by every tool.

A lever names what it sets (environment variables read at process start, fields of the launch
interposer's policy, a torch call at start-up), where it applies (CUDA, ROCm, CPU; an NCCL version
range; the lab's single process or a fresh training process), what it costs, and how the planner
reasons about it, and the mark it leaves in a run's launches (so a tool can tell a lever that took effect
from one that was ignored). Strategies are combinations of levers, written `lever[=value]+lever...`; their
names are derived from the levers, so the lab, the bench, `ccoverlap run` and the tuner share one
list and one set of names. A new lever is one entry in `LEVERS`, plus one entry in each table of its
mechanisms, made through `mechanisms` so that a lever missing one fails at import, naming it: its what-if
transformation (whatif/transforms.py TRANSFORMS), its lab set-up (lab/runner.py LAB_SETUP), the mechanisms of
the diagnosis it removes (analysis/recommend.py REMEDIES); `NotApplicable(why)` where it has none.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar

from ccoverlap.model import nccl
from ccoverlap.util.errors import UsageError
from ccoverlap.util.text import shorten

if TYPE_CHECKING:
    from ccoverlap.control.interposer import LaunchStats

PLATFORMS = ("cuda", "rocm", "cpu")
SCOPES = ("process", "lab")  # a fresh (training) process, or the lab's one process on its own kernels


@dataclass(frozen=True)
class Setting:
    """What a lever at one value sets: environment, interposer policy fields, torch start-up calls."""

    env: Mapping[str, str] = field(default_factory=dict)
    policy: Mapping[str, str] = field(default_factory=dict)
    startup: Mapping[str, str] = field(default_factory=dict)  # name in STARTUP_CALLS -> argument

    def merged(self, other: Setting, why: str) -> Setting:
        """Both settings at once; a key set to two different values is a UsageError naming `why`."""
        out = {}
        for part in ("env", "policy", "startup"):
            mine, theirs = getattr(self, part), getattr(other, part)
            for key in mine.keys() & theirs.keys():
                if mine[key] != theirs[key]:
                    raise UsageError(f"{why}: {part} {key} is set to both {mine[key]} and {theirs[key]}")
            out[part] = {**mine, **theirs}
        return Setting(**out)


@dataclass(frozen=True)
class Domain:
    """The values a lever takes: named choices, or whole numbers lo..hi in steps of `step`."""

    choices: tuple[str, ...] = ()
    lo: int = 0
    hi: int = 0
    step: int = 1
    auto: bool = False  # "auto" is also valid: the tool sizes it (e.g. SMs for the comm CTAs)

    def parse(self, lever: str, text: str) -> str:
        if self.auto and text == "auto":
            return text
        if self.choices:
            for choice in self.choices:
                if text.lower() == choice.lower():
                    return choice
            raise UsageError(f"{lever}={shorten(text, 40)}: valid {', '.join(self.choices)}")
        # int() of 5000 digits raises
        digits = re.fullmatch(r"[0-9]+", text) and len(text.lstrip("0")) <= len(str(self.hi))
        if not digits or not self.lo <= int(text) <= self.hi or (int(text) - self.lo) % self.step:
            steps = f" in steps of {self.step}" if self.step > 1 else ""
            extra = " or auto" if self.auto else ""
            raise UsageError(f"{lever}={shorten(text, 40)}: valid {self.lo}..{self.hi}{steps}{extra}")
        return str(int(text))

    def describe(self) -> str:
        if self.choices:
            return "|".join(self.choices)
        steps = f" step {self.step}" if self.step > 1 else ""
        return f"{self.lo}..{self.hi}{steps}" + ("|auto" if self.auto else "")


FLAG = Domain(choices=("on",))


@dataclass(frozen=True)
class Host:
    """What decides whether a lever applies here."""

    platform: str  # cuda, rocm or cpu
    nccl: tuple[int, ...] | None = None  # (major, minor, patch) of the NCCL torch uses
    compute_capability: tuple[int, int] | None = None
    sm_carveout: bool = False  # torch._C._set_sm_carveout_experimental exists
    green_contexts: bool = False  # torch.cuda.green_contexts is importable
    interposer: bool = False  # the launch interposer is built

    @classmethod
    def detect(cls) -> Host:
        """This machine, read without starting any GPU work beyond torch's device query."""
        import importlib.util

        interposer = importlib.util.find_spec("ccoverlap._interposer") is not None
        try:
            import torch
        except ImportError:
            return cls("cpu", interposer=interposer)
        if not torch.cuda.is_available():
            return cls("cpu", interposer=interposer)
        nccl = None
        if hasattr(torch.cuda, "nccl"):
            try:
                v = torch.cuda.nccl.version()
                nccl = tuple(v) if isinstance(v, tuple) else (v // 1000, v % 1000 // 100, v % 100)
            except (RuntimeError, AttributeError):
                nccl = None
        green = importlib.util.find_spec("torch.cuda.green_contexts") is not None
        return cls(
            "rocm" if getattr(torch.version, "hip", None) else "cuda", nccl,
            torch.cuda.get_device_capability(0), hasattr(torch._C, "_set_sm_carveout_experimental"),
            green, interposer,
        )


@dataclass(frozen=True)
class Mark:
    """What a lever at a value leaves in a run's launches, as the launch interposer's stats show them
    (control/interposer.LaunchStats): whether it took effect. NCCL ignores NCCL_MAX_CTAS for some collectives,
    a variable may be read by nobody, a pad may find nothing to pad: a lever's effect is checked, not assumed."""

    what: str  # the mark, in words ({value}: the lever's value)
    seen: Callable[[LaunchStats, str], bool | None]  # present, absent, or None: these launches cannot tell

    def check(self, stats: LaunchStats | None, value: str) -> bool | None:
        return None if stats is None else self.seen(stats, value)


def _on_comm(test: Callable[[LaunchStats, str], bool]) -> Callable[[LaunchStats, str], bool | None]:
    """A mark read off the communication launches: unknown without any (or without what `test` reads)."""
    def seen(s: LaunchStats, value: str) -> bool | None:
        try:
            return test(s, value) if s.comm_launches else None
        except (TypeError, ValueError):  # a field the stats lack: min() of nothing, None[1]
            return None
    return seen


@dataclass(frozen=True)
class Lever:
    """One runtime control. `setting` turns a (validated) value into what it sets."""

    name: str
    summary: str
    sets: str  # what it touches, for people
    domain: Domain
    default: str  # the value a strategy means when it names the lever alone
    setting: Callable[[str], Setting]
    cost: str
    planner: str  # how the planner and the doctor reason about it
    platforms: tuple[str, ...] = ("cuda",)
    nccl_min: tuple[int, ...] | None = None  # first NCCL release that honours it
    needs: Callable[[Host], str | None] = lambda _host: None  # further conditions: a reason, or None
    not_in: Mapping[str, str] = field(default_factory=dict)  # scope -> why the lever has no effect there
    tries: tuple[str, ...] = ()  # the values `ccoverlap tune` tries, most promising first (none: the default)
    mark: Mark | None = None  # what it leaves in the launches; None: nothing the interposer can see

    @property
    def candidates(self) -> tuple[str, ...]:
        return tuple(self.value(v) for v in self.tries or (self.default,))

    def value(self, text: str | None) -> str:
        return self.domain.parse(self.name, self.default if text is None else text)

    def applies(self, host: Host, scope: str = "process") -> str | None:
        """None when the lever works on `host` in `scope`, else the reason it does not."""
        if scope in self.not_in:
            return self.not_in[scope]
        if host.platform not in self.platforms:
            return f"needs {' or '.join(p.upper() if p != 'rocm' else 'ROCm' for p in self.platforms)}"
        if self.nccl_min and host.platform == "cuda":
            if host.nccl is None:
                return f"needs NCCL >= {_version(self.nccl_min)}; torch reports no NCCL"
            if host.nccl < self.nccl_min:
                return f"needs NCCL >= {_version(self.nccl_min)}; this is {_version(host.nccl)}"
        return self.needs(host)


def _version(v: Iterable[int]) -> str:
    return ".".join(map(str, v))


def _env(var: str) -> Callable[[str], Setting]:
    return lambda value: Setting(env={var: value})


def _needs_interposer(host: Host) -> str | None:
    return None if host.interposer else "the launch interposer is not built (pip install -e .)"


def _needs_sm90(host: Host) -> str | None:
    cc = host.compute_capability
    return None if cc is None or cc >= (9, 0) else "thread-block clusters need compute capability 9.0 or newer"


#: NCCL_CTA_POLICY's values (NCCL 2.27/2.28 read it as an integer; names came later).
CTA_POLICIES = {name: str(number) for number, name in nccl.CTA_POLICY_VALUES.items()}
_ONE_PROCESS = "needs a fresh process: the lab runs every strategy in one"
_PROXY_NO_CE = "the lab's proxy has no copy-engine path (use nccl-ctas there for fewer CTAs)"
_NO_GREEN_STREAM = ("needs the compute on a green-context stream (torch.cuda.green_contexts), which a program "
                    "creates itself; launched from outside, its kernels stay on the streams it made")

LEVERS: tuple[Lever, ...] = (
    Lever(
        "priority", "communication on high-priority streams, so its blocks are dispatched first",
        "env TORCH_NCCL_HIGH_PRIORITY=1 (every NCCL group); lab: comm on the greatest-priority stream",
        FLAG, "on", lambda _v: Setting(env={"TORCH_NCCL_HIGH_PRIORITY": "1"}),
        cost="compute loses the room the comm CTAs take beside it, most where they land first on idle SMs "
             "(their shared-memory configuration: comm-carveout-hint keeps it; docs/doctor.md)",
        planner="fixes dispatch_order (a later grid of equal priority waits for the earlier one's dispatch)",
        platforms=("cuda", "rocm"),
        mark=Mark("communication launched on streams of raised priority (< 0)",
                  _on_comm(lambda s, _v: min(s.comm_priorities) < 0)),
    ),
    Lever(
        "shape", "occupancy shaping: compute blocks padded with dynamic shared memory so comm CTAs fit beside them",
        "interposer policy mode=auto (LD_PRELOAD); lab: planned pad on its own kernels",
        Domain(choices=("auto",)), "auto", lambda v: Setting(policy={"mode": v}),
        cost="fewer resident compute blocks while comm is in flight (capped by the policy's keep)",
        planner="the pad planner: smallest pad that lets the comm CTA fit, drain by grid; "
                "infeasible when registers bind",
        platforms=("cuda", "rocm"), needs=_needs_interposer,
        mark=Mark("compute launches padded", lambda s, _v: s.padded > 0),
    ),
    Lever(
        "carveout-hint",
        "compute kernels ask for a larger shared-memory carveout, so a comm CTA finds its shared memory",
        "interposer policy carveout=PERCENT (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT on compute kernels)",
        Domain(lo=0, hi=100), "100", lambda v: Setting(policy={"carveout": v}),
        cost="L1 cache given up to shared memory on SMs running those kernels",
        planner="fixes cause carveout: occupancy.fits_beside with the resident's hint set",
        needs=_needs_interposer,
        mark=Mark("the carveout hint set on compute kernels", lambda s, _v: s.carveout_set > 0),
    ),
    Lever(
        "comm-carveout-hint",
        "communication kernels ask for the largest shared-memory carveout, so an SM that takes a collective's CTA "
        "first keeps room for compute's blocks",
        "interposer policy comm_carveout=PERCENT (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT on communication "
        "kernels)",
        Domain(lo=0, hi=100), "100", lambda v: Setting(policy={"comm_carveout": v}),
        cost="L1 cache given up to shared memory on SMs running communication kernels",
        planner="fixes cause carveout where the comm CTA is the SM's first resident: occupancy.beside with the "
                "collective as the resident, its hint set (what-if: comm_carveout_hint)",
        needs=_needs_interposer,
        mark=Mark("the carveout hint set on communication kernels", lambda s, _v: s.comm_carveout_set > 0),
    ),
    Lever(
        "sm-carveout", "cuBLAS GEMMs leave N SMs free for communication",
        "torch._C._set_sm_carveout_experimental(N) at start-up",
        Domain(lo=1, hi=128, auto=True), "auto", lambda v: Setting(startup={"sm_carveout": v}),
        cost="GEMMs run on N fewer SMs",
        planner="partitions SMs for library GEMMs (the only compute it reaches)",
        needs=lambda h: None if h.sm_carveout or h.platform != "cuda" else "this torch has no SM carveout",
    ),
    Lever(
        "green", "compute confined to a green context that leaves N SMs to communication",
        "torch.cuda.green_contexts (compute stream of a context without comm's SMs)",
        Domain(lo=1, hi=128, auto=True), "auto", lambda _v: Setting(),  # the lab's mechanism only
        cost="compute runs on N fewer SMs; cuBLAS sizes persistent grids for all SMs",
        planner="partitions SMs for every compute kernel",
        needs=lambda h: None if h.green_contexts or h.platform != "cuda" else "this torch has no green contexts",
        not_in={"process": _NO_GREEN_STREAM},
        mark=Mark("compute launched in a green context", lambda s, _v: bool(s.sm_limits)),
    ),
    Lever(
        "nccl-cluster", "NCCL's CTAs launched in thread-block clusters of this size (default 4 on sm_90)",
        "env NCCL_CGA_CLUSTER_SIZE", Domain(lo=0, hi=8), "1", _env("NCCL_CGA_CLUSTER_SIZE"),
        cost="none known; clusters only co-schedule CTAs on one GPC",
        planner="fixes cause cluster: a cluster of 4 needs 4 SMs of one GPC free at once",
        nccl_min=(2, 17, 1), needs=_needs_sm90,
        mark=Mark("communication launched in clusters of at most {value}",
                  _on_comm(lambda s, v: max(s.comm_clusters) <= max(int(v), 1))),
    ),
    Lever(
        "nccl-cta-policy", "NCCL chooses its CTAs for sharing the GPU: EFFICIENCY (fewest CTAs), ZERO (copy engines)",
        "env NCCL_CTA_POLICY (1 EFFICIENCY, 2 ZERO)", Domain(choices=tuple(CTA_POLICIES)), "EFFICIENCY",
        lambda v: Setting(env={"NCCL_CTA_POLICY": CTA_POLICIES[v]}),
        cost="collectives may run slower on fewer CTAs; ZERO only for AllGather/AlltoAll on symmetric-window buffers",
        planner="fewer comm CTAs to place; ZERO: none at all",
        nccl_min=(2, 27, 3), not_in={"lab": _PROXY_NO_CE},
    ),
    Lever(
        "nccl-ctas", "at most N CTAs per NCCL collective",
        "env NCCL_MAX_CTAS", Domain(lo=1, hi=64), "4", _env("NCCL_MAX_CTAS"),
        cost="collectives slower where bandwidth needs the CTAs",
        planner="fewer comm CTAs to place beside compute",
        nccl_min=(2, 17, 1), tries=("4", "2", "8"),
        mark=Mark("communication launched with at most {value} CTAs",
                  _on_comm(lambda s, v: s.comm_grid[1] <= int(v))),
    ),
    Lever(
        "nccl-threads", "threads per NCCL CTA (ring Simple adds a sync warp; send/recv keeps 640)",
        "env NCCL_NTHREADS", Domain(lo=64, hi=512, step=32), "256", _env("NCCL_NTHREADS"),
        cost="each CTA moves less per step; dynamic shared memory stays sized for 640 threads (NCCL issue 1985)",
        planner="a smaller CTA in threads and registers, so it can fit beside compute",
        mark=Mark("communication CTAs of at most {value} threads (+ NCCL's sync warp)",
                  _on_comm(lambda s, v: s.comm_threads[1] <= int(v) + 32)),
    ),
    Lever(
        "max-connections", "hardware work queues per device: 1 serialises launches, so launch order decides",
        "env CUDA_DEVICE_MAX_CONNECTIONS", Domain(lo=1, hi=32), "1", _env("CUDA_DEVICE_MAX_CONNECTIONS"),
        cost="false dependencies between streams",
        planner="none: it orders launches, it does not make room",
        not_in={"lab": _ONE_PROCESS},
    ),
)
BY_NAME: Mapping[str, Lever] = MappingProxyType({lever.name: lever for lever in LEVERS})


# --- each lever's mechanisms: one table per kind, checked against LEVERS ----------------------------

@dataclass(frozen=True)
class NotApplicable:
    """A lever's explicit entry in a table of mechanisms it has none of, and why."""

    why: str


M = TypeVar("M")
#: every table made through `mechanisms`: its kind -> lever name -> the lever's mechanism of that kind
MECHANISMS: dict[str, Mapping[str, object]] = {}


def unfilled(table: Mapping[str, object], registry: Sequence[Lever] | None = None) -> str | None:
    """What is wrong with `table` (lever name -> mechanism) against `registry` (LEVERS), in words, or None: a lever
    without an entry, an entry that names no lever."""
    names = [lv.name for lv in (LEVERS if registry is None else registry)]
    missing = [n for n in names if n not in table]
    unknown = [n for n in table if n not in names]
    parts = ([f"no entry for lever(s) {', '.join(missing)} (its mechanism, or NotApplicable(why))"]
             if missing else []) \
        + ([f"entries that name no lever: {', '.join(unknown)}"] if unknown else [])
    return "; ".join(parts) or None


def mechanisms(kind: str, table: Mapping[str, M | NotApplicable]) -> Mapping[str, M | NotApplicable]:
    """`table` as the levers' mechanisms of `kind`, once every lever of LEVERS has its entry and every entry is a
    lever's: else a TypeError at import, naming them, rather than a lever that fails halfway through a run."""
    if problem := unfilled(table):
        raise TypeError(f"the levers' {kind} table (control/levers.py LEVERS): {problem}")
    MECHANISMS[kind] = frozen = MappingProxyType(dict(table))
    return frozen


def lever(name: str) -> Lever:
    if name not in BY_NAME:
        raise UsageError(f"unknown lever {name!r}: valid {', '.join(BY_NAME)}")
    return BY_NAME[name]


# --- strategies: combinations of levers -----------------------------------------------------------

NO_OVERLAP = "no-overlap"  # the baseline: every collective waited for before computing on
DEFAULT = "default"  # no lever: what the program does without ccoverlap


@dataclass(frozen=True)
class Strategy:
    """A combination of levers at values (empty: `default`), or the `no-overlap` baseline."""

    levers: tuple[tuple[str, str], ...] = ()  # (lever, value), in the order written
    no_overlap: bool = False

    @property
    def name(self) -> str:
        if self.no_overlap:
            return NO_OVERLAP
        if not self.levers:
            return DEFAULT
        return "+".join(name if value == BY_NAME[name].default else f"{name}={value}" for name, value in self.levers)

    @property
    def values(self) -> dict[str, str]:
        return dict(self.levers)

    def setting(self) -> Setting:
        """Everything the combination sets; a conflict between two levers is a UsageError."""
        out = Setting()
        for name, value in self.levers:
            out = out.merged(BY_NAME[name].setting(value), f"strategy {self.name}")
        return out

    def not_applicable(self, host: Host, scope: str = "process") -> str | None:
        """The first lever that does not apply, as `lever: reason`, or None."""
        for name, _ in self.levers:
            if reason := BY_NAME[name].applies(host, scope):
                return f"{name}: {reason}"
        return None

    def describe(self) -> str:
        if self.no_overlap:
            return "wait for each collective before computing on (the baseline)"
        if not self.levers:
            return "no lever: the program's own overlap"
        return "; ".join(BY_NAME[name].summary for name, _ in self.levers)


@cache
def strategy(text: str) -> Strategy:
    """Parse `no-overlap`, `default` or `lever[=value]+lever[=value]...`; UsageError naming what is wrong."""
    text = text.strip()
    if text == NO_OVERLAP:
        return Strategy(no_overlap=True)
    if text == DEFAULT:
        return Strategy()
    parts, seen = [], set()
    for part in text.split("+"):
        name, _, value = part.partition("=")
        lv = lever(name.strip())
        if lv.name in seen:
            raise UsageError(f"strategy {text}: lever {lv.name} named twice")
        seen.add(lv.name)
        parts.append((lv.name, lv.value(value.strip() if value else None)))
    out = Strategy(tuple(parts))
    out.setting()  # conflicts are bad input now, not at launch
    return out


#: The strategies every tool runs by default, in this order (the lab and the bench filter by scope).
STRATEGIES: tuple[Strategy, ...] = tuple(strategy(s) for s in (
    NO_OVERLAP, DEFAULT, "priority", "shape", "priority+shape", "sm-carveout+priority", "green",
    "nccl-threads+shape+priority", "nccl-ctas+nccl-threads", "max-connections", "carveout-hint+priority",
    "nccl-cluster", "nccl-cta-policy",
))


def marks_seen(stats: LaunchStats | None) -> dict[str, bool | None]:
    """Every lever that declares a mark, at the value a strategy means by its name: is its mark in these
    launches? (What a run under `ccoverlap run --strategy` shows of the levers in effect.)"""
    return {strategy(lv.name).name: lv.mark.check(stats, lv.default) for lv in LEVERS if lv.mark}


def took_effect(chosen: Sequence[tuple[str, str]], stats: LaunchStats | None) -> dict[str, bool | None]:
    """Per lever (name, value) of a combination: its mark present (True), absent (False: it did nothing to
    these launches), or None (no mark declared, no stats, or nothing in them to tell)."""
    return {name: mark.check(stats, value) if (mark := BY_NAME[name].mark) else None for name, value in chosen}


def table(host: Host) -> list[dict]:
    """One row per lever with its applicability on `host` in each scope (for `ccoverlap levers`)."""
    return [
        {
            "name": lv.name, "values": lv.domain.describe(), "default": lv.default, "sets": lv.sets,
            "summary": lv.summary, "cost": lv.cost, "planner": lv.planner, "platforms": list(lv.platforms),
            "nccl_min": _version(lv.nccl_min) if lv.nccl_min else None,
            "applies": {s: lv.applies(host, s) or "yes" for s in SCOPES},
            "mark": lv.mark.what if lv.mark else None,
        }
        for lv in LEVERS
    ]


def comm_sms(ctas: int, sm_count: int) -> int:
    """SMs communication needs on its own (`auto` for sm-carveout and green): its CTAs at one per SM, in
    green-context units of 8, leaving compute at least 8."""
    return min(-(-ctas // 8) * 8, sm_count - 8)


def sm_carveout(sms: int) -> None:
    """The `sm-carveout` start-up call: cuBLAS leaves `sms` SMs free (0 restores all)."""
    import torch

    torch._C._set_sm_carveout_experimental(sms or None)


#: start-up calls a Setting may name, applied in the process before its first GPU work
STARTUP_CALLS: Mapping[str, Callable[[int], None]] = MappingProxyType({"sm_carveout": sm_carveout})


def run_startup(startup: Mapping[str, str], auto_sms: int) -> None:
    """Make `startup`'s calls; "auto" becomes `auto_sms` (the SMs the comm CTAs need)."""
    for name, arg in startup.items():
        STARTUP_CALLS[name](auto_sms if arg == "auto" else int(arg))
