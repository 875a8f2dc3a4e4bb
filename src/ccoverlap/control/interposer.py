"""The launch interposer from Python: where the library is, the policy it will read, how to preload it.

The library (csrc/interposer*.c) is preloaded into a program by a launch with policy
fields (control/launch.py) and reads its policy from the environment and an optional JSON file. The policy's
fields and its parser live in one place, csrc/policy.c, compiled into both the
library and the ctypes core Python loads: `Policy` is built from that parser's
normalized JSON, so `ccoverlap run` refuses exactly what the library would; the
library, preloaded by hand with a bad policy, says so on stderr and passes every
launch through unchanged. `set_policy` switches the mode of the library
preloaded into this process, `set_serialize` makes its launches take turns on an
idle device (the doctor's alone window), and `LaunchStats` reads what its stats
say the launches showed (the marks levers leave, control/levers.py).
"""
from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import json
import os
from collections.abc import Iterable, Mapping
from functools import cache

from ccoverlap.model import _native
from ccoverlap.util.errors import UsageError, check_range
from ccoverlap.util.inputs import open_regular


@dataclasses.dataclass(frozen=True)
class Field:
    """One policy field, as the C table (csrc/policy.c: ccov_fields) defines it."""

    key: str  # JSON key and Policy attribute
    env: str  # environment variable
    option: str  # `ccoverlap run` option
    metavar: str
    kind: str  # enum, int, int_auto (a whole number or "auto"), regex, path
    lo: int  # int, int_auto: valid range
    hi: int
    choices: tuple[str, ...]  # enum
    default: str | None  # the value when not given, as text
    sets_mode: str | None  # the mode this field is the value of
    help: str

    @property
    def valid(self) -> str:
        """The valid values, in words ("" for a path: any)."""
        return {
            "enum": ", ".join(self.choices),
            "int": f"{self.lo}..{self.hi}",
            "int_auto": f"auto or {self.lo}..{self.hi}",
            "regex": "POSIX extended regex",
            "path": "",
        }[self.kind]


def _read_fields() -> tuple[Field, ...]:
    lib = _native.lib()

    def text(b: bytes | None) -> str | None:
        return None if b is None else b.decode()

    def row(c: _native.CPolicyField) -> Field:
        choices = []
        while c.choices and c.choices[len(choices)] is not None:
            choices.append(c.choices[len(choices)].decode())
        return Field(c.key.decode(), c.env.decode(), c.option.decode(), c.metavar.decode(),
                     _native.POLICY_KINDS[c.kind], c.lo, c.hi, tuple(choices), text(c.default), text(c.sets_mode),
                     c.help.decode())

    return tuple(row(lib.ccov_policy_field(i).contents) for i in range(lib.ccov_policy_nfields()))


#: every policy field, in the C table's order
FIELDS = _read_fields()
BY_KEY = {f.key: f for f in FIELDS}
#: the variable naming the JSON policy file
POLICY_ENV = ctypes.c_char_p.in_dll(_native.lib(), "ccov_policy_file_env").value.decode()
MODES = BY_KEY["mode"].choices  # index = the mode argument of ccoverlap_set_policy


def parse(environ: Mapping[str, str]) -> dict[str, int | str | None]:
    """The normalized policy the library will read from `environ` (the CCOVERLAP_POLICY file, then
    each set, non-empty variable): every field, None where it has no value. UsageError with the
    library's message when it would refuse it."""
    env = [os.fsencode(f"{k}={v}") for k, v in environ.items()]
    argv = (ctypes.c_char_p * (len(env) + 1))(*env, None)
    cap = 1 << 16
    while True:
        out = ctypes.create_string_buffer(cap)
        rc = _native.lib().ccov_policy_parse(argv, out, cap)
        if rc <= 0:
            break
        cap = rc  # the size the answer needs
    text = os.fsdecode(out.value)
    if rc < 0:
        raise UsageError(text)
    return json.loads(text)


def built() -> bool:
    """Is the interposer library built (so it can be preloaded)?"""
    return importlib.util.find_spec("ccoverlap._interposer") is not None


def library_path() -> str:
    """Path of the built interposer library (for LD_PRELOAD)."""
    spec = importlib.util.find_spec("ccoverlap._interposer")
    if spec is None or not spec.origin:
        raise UsageError("the launch interposer is not built: reinstall with `pip install -e .`")
    return spec.origin


def preload_env(environ: Mapping[str, str]) -> dict[str, str]:
    """{"LD_PRELOAD": ...} that puts the interposer first in `environ`'s LD_PRELOAD and keeps what was
    there (a user's allocator, say): the loader splits on colons and spaces; the interposer appears once."""
    return {"LD_PRELOAD": " ".join([library_path(), *_others(environ)])}


def without_preload(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with the interposer out of LD_PRELOAD (the rest kept; no LD_PRELOAD where nothing is left)."""
    env = {k: v for k, v in environ.items() if k != "LD_PRELOAD"}
    if "LD_PRELOAD" in environ and (kept := _others(environ)):
        env["LD_PRELOAD"] = " ".join(kept)
    return env


def _others(environ: Mapping[str, str]) -> list[str]:
    """What `environ` preloads besides the interposer (a built one: without it nothing is the interposer)."""
    spec = importlib.util.find_spec("ccoverlap._interposer")
    mine = os.path.realpath(spec.origin) if spec and spec.origin else None
    return [p for p in environ.get("LD_PRELOAD", "").replace(":", " ").split() if os.path.realpath(p) != mine]


class _PolicyMethods:
    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Policy:
        """The policy the library will read from `environ`; UsageError with the library's message."""
        return cls(**parse(environ))


_DEFAULTS = parse({})
Policy = dataclasses.make_dataclass(
    "Policy",
    [(f.key, int | None if f.kind.startswith("int") else str | None, dataclasses.field(default=_DEFAULTS[f.key]))
     for f in FIELDS],
    bases=(_PolicyMethods,),
    frozen=True,
)
Policy.__module__ = __name__  # make_dataclass's own argument for it needs Python 3.12
Policy.__doc__ = """What the interposer pads: one attribute per field of the C table (FIELDS, docs/interposer.md),
None where the library decides (unset, drain "auto", gate by mode); the defaults are the library's."""


@cache
def _export(name: str, argtypes: tuple = (), restype=None):
    """A function the preloaded interposer exports, or None where it is not loaded; looked up once (the lab
    switches around every repetition)."""
    fn = getattr(ctypes.CDLL(None), name, None)
    if fn is not None:
        fn.argtypes, fn.restype = list(argtypes), restype
    return fn


def _switch():
    return _export("ccoverlap_set_policy", (ctypes.c_int, ctypes.c_int), ctypes.c_int)


def preloaded() -> bool:
    """Is the interposer loaded into this process (so set_policy can switch it)?"""
    return _switch() is not None


def set_policy(mode: str, value: int | None = None) -> None:
    """Switch the interposer preloaded into this process to `mode`, at once, for every thread.

    `value` is the value of the modes that take one ("pad": bytes, "blocks": blocks per SM; the
    fields' ranges), and must be None for "off" and "auto". The other fields keep what the process
    started with; memoised decisions are dropped, stats keep counting. For programs that run
    several strategies in one process (`ccoverlap run --mode off -- python lab.py`).
    """
    if mode not in MODES:
        raise UsageError(f"mode {mode!r} is not a mode: valid {', '.join(MODES)}")
    valued = {f.sets_mode: f for f in FIELDS if f.sets_mode}
    field = valued.get(mode)
    if field is None:
        if value is not None:
            takes = " and ".join(f"{m} ({f.env})" for m, f in valued.items())
            raise UsageError(f"mode {mode} takes no value: only {takes} do")
        value = 0
    else:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"mode {mode} needs a whole number: {field.env} valid {field.valid}")
        check_range(field.env, value, field.lo, field.hi)
    switch = _switch()
    if switch is None:
        raise RuntimeError(
            "the interposer is not preloaded into this process: start it with `ccoverlap run -- CMD` "
            "(or LD_PRELOAD=$(ccoverlap interposer --path))"
        )
    if switch(MODES.index(mode), value) != 0:
        raise RuntimeError(
            "the interposer refused the switch: the policy it started with is invalid, so every launch "
            "passes through unchanged (see its line on stderr)"
        )


def set_serialize(on: bool) -> bool | None:
    """Make every launch of this process (all threads) start on an idle device and end before the next starts,
    or stop it; the previous setting, or None where the interposer is not preloaded."""
    fn = _export("ccoverlap_set_serialize", (ctypes.c_int,), ctypes.c_int)
    return None if fn is None else bool(fn(int(on)))


def arm_hold(stream: int, ptr: int, value: int) -> bool:
    """Make the next kernel launch of this process (any thread) first put a wait on `stream` until the 32-bit word
    at device address `ptr` is at least `value` (value 0: disarm); False where the interposer is not preloaded."""
    fn = _export("ccoverlap_arm_hold", (ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_uint), ctypes.c_int)
    if fn is not None:
        fn(stream or None, ptr, value)
    return fn is not None


def register_graph_twin(executable: int, twin: int) -> bool | None:
    """Register `twin` (a CUDA graph executable: the graph's nodes chained, doctor/graph_capture.py) to replay in
    place of `executable` in serialized launches; the interposer then owns it. True registered, False refused,
    None where the interposer is not preloaded."""
    fn = _export("ccoverlap_graph_twin", (ctypes.c_void_p, ctypes.c_void_p), ctypes.c_int)
    return None if fn is None else fn(executable, twin) == 0


def write_stats() -> bool:
    """Write the interposer's stats now (a process that ends with os._exit skips the atexit that does it);
    False where it is not preloaded."""
    fn = _export("ccoverlap_write_stats")
    if fn is not None:
        fn()
    return fn is not None


@dataclasses.dataclass(frozen=True)
class LaunchStats:
    """What the interposer saw a program's launches do, merged over its processes' stats files
    (docs/interposer.md, "Stats"): the marks a lever leaves (control/levers.py: Mark)."""

    files: int
    launches: int
    comm_launches: int
    comm_priorities: frozenset[int]  # the priorities of the streams communication was launched on (lower: higher)
    comm_clusters: frozenset[int]  # the cluster sizes it was launched with (1: none)
    comm_grid: tuple[int, int] | None  # fewest and most CTAs of a communication launch
    comm_threads: tuple[int, int] | None  # fewest and most threads per CTA
    padded: int  # launches padded
    carveout_set: int  # compute kernels given the carveout hint (policy carveout)
    comm_carveout_set: int  # communication kernels given the carveout hint (policy comm_carveout)
    cooperative: frozenset[str]  # kernels launched cooperatively (every block resident at once)
    sm_limits: Mapping[str, int]  # kernel name -> the fewest SMs its launches' context allowed (a green context)
    serialized: int  # launches made alone (the doctor's alone window)

    @classmethod
    def read(cls, paths: Iterable[str | os.PathLike]) -> LaunchStats | None:
        """The stats files at `paths` merged (files that are not the interposer's stats are left out); None
        when there is none."""
        docs = []
        for path in paths:
            try:  # a FIFO or a device named like a stats file is left out, never waited on
                with open_regular(path, "the interposer's stats") as f:
                    doc = json.loads(f.read())
            except (OSError, ValueError, UsageError):
                continue
            if isinstance(doc, dict) and isinstance(doc.get("kernels"), list):
                docs.append(doc)
        if not docs:
            return None
        comm = [d.get("comm_launches") or {} for d in docs]

        def span(key: str) -> tuple[int, int] | None:
            spans = [c[key] for c in comm if c.get(key)]
            return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None

        limits: dict[str, int] = {}
        for d in docs:
            for k in d["kernels"]:
                if k.get("sm_limit"):
                    limits[k["name"]] = min(k["sm_limit"], limits.get(k["name"], k["sm_limit"]))
        return cls(
            files=len(docs), launches=sum(d.get("launches", 0) for d in docs),
            comm_launches=sum(c.get("launches", 0) for c in comm),
            comm_priorities=frozenset(int(p) for c in comm for p in c.get("priority", {})),
            comm_clusters=frozenset(int(n) for c in comm for n in c.get("cluster", {})),
            comm_grid=span("grid"), comm_threads=span("threads"),
            padded=sum(d.get("padded", 0) for d in docs), carveout_set=sum(d.get("carveout_set", 0) for d in docs),
            comm_carveout_set=sum(d.get("comm_carveout_set", 0) for d in docs),
            cooperative=frozenset(k["name"] for d in docs for k in d["kernels"]
                                  if k.get("skipped", {}).get("cooperative")),
            sm_limits=limits, serialized=sum((d.get("serial") or {}).get("serialized", 0) for d in docs),
        )

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        return out | {k: sorted(out[k]) for k in ("comm_priorities", "comm_clusters", "cooperative")}
