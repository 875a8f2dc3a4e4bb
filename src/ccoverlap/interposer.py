"""The launch interposer from Python: where the library is, and the policy it will read.

The library (csrc/interposer*.c) is preloaded into a program by `ccoverlap run`
and reads its policy from the environment and an optional JSON file. `Policy`
reads the same sources with the same rules, so `ccoverlap run` refuses bad
input before the program starts; the library, preloaded by hand with a bad
policy, says so on stderr and passes every launch through unchanged.
`set_policy` switches the mode of the library preloaded into this process.
"""
from __future__ import annotations

import ctypes
import importlib.util
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from ccoverlap.errors import UsageError, check_range

MODES = ("off", "pad", "blocks", "auto")  # index = the mode argument of ccoverlap_set_policy
GATES = ("comm", "always")
POLICY_ENV = "CCOVERLAP_POLICY"
#: policy field -> environment variable (csrc/interposer.c: field_envs)
ENV = {
    "mode": "CCOVERLAP_MODE",
    "pad_bytes": "CCOVERLAP_PAD_BYTES",
    "blocks": "CCOVERLAP_BLOCKS",
    "comm_per_sm": "CCOVERLAP_COMM_PER_SM",
    "drain": "CCOVERLAP_DRAIN",
    "gate": "CCOVERLAP_GATE",
    "keep": "CCOVERLAP_KEEP",
    "include": "CCOVERLAP_INCLUDE",
    "exclude": "CCOVERLAP_EXCLUDE",
    "comm": "CCOVERLAP_COMM",
    "stats": "CCOVERLAP_STATS",
}
#: valid ranges of the numeric fields (csrc/interposer.c: PAD_MAX, BLOCKS_MAX, PER_SM_MAX, KEEP_MAX)
RANGES = {"pad_bytes": (1, 1048575), "blocks": (1, 2048), "comm_per_sm": (1, 64), "keep": (0, 100)}
#: drain: "auto" or a whole number in this range (csrc/interposer.c: DRAIN_MAX)
DRAIN_RANGE = (0, 64)
_REGEX_FIELDS = ("include", "exclude", "comm")
_WHOLE = re.compile(r"-?[0-9]+")
_POLICY_FILE_MAX = 65535


def library_path() -> str:
    """Path of the built interposer library (for LD_PRELOAD)."""
    spec = importlib.util.find_spec("ccoverlap._interposer")
    if spec is None or not spec.origin:
        raise UsageError("the launch interposer is not built: reinstall with `pip install -e .`")
    return spec.origin


@dataclass(frozen=True)
class Policy:
    """What the interposer pads: see docs/interposer.md for every field."""

    mode: str = "off"
    pad_bytes: int | None = None  # mode pad: bytes added to every compute launch
    blocks: int | None = None  # mode blocks: target compute blocks per SM
    comm_per_sm: int = 1  # mode auto: communication CTAs to fit beside compute on each SM
    drain: int | None = None  # mode auto: compute blocks that may retire first; None: by the launch's grid
    gate: str | None = None  # "comm": pad only while communication is in flight, "always"; None: comm in auto
    keep: int = 50  # mode auto: skip a pad leaving fewer than keep% of the unpadded blocks per SM; 0: no cap
    include: str | None = None  # POSIX extended regexes on kernel names
    exclude: str | None = None
    comm: str | None = None  # more communication kernels, besides names containing nccl or rccl
    stats: str | None = None  # JSON stats path written at exit; %p becomes the pid

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Policy:
        """The policy the library will read from `environ`: the CCOVERLAP_POLICY file, then
        each set, non-empty variable. Raises UsageError with the library's message."""
        raw: dict[str, str] = {}
        if path := environ.get(POLICY_ENV):
            raw |= _read_policy_file(path)
        raw |= {field: environ[var] for field, var in ENV.items() if environ.get(var)}
        return cls.from_fields(raw)

    @classmethod
    def from_fields(cls, raw: Mapping[str, str]) -> Policy:
        values: dict[str, object] = {k: raw[k] for k in ("stats", *_REGEX_FIELDS) if k in raw}
        for field, (lo, hi) in RANGES.items():
            if field in raw:
                text = raw[field]
                if not _WHOLE.fullmatch(text):
                    raise UsageError(f"{ENV[field]}={text} is not a whole number")
                values[field] = check_range(ENV[field], int(text), lo, hi)
        if "drain" in raw:
            values["drain"] = _parse_drain(raw["drain"])
        if "gate" in raw:
            if raw["gate"] not in GATES:
                raise UsageError(f"CCOVERLAP_GATE={raw['gate']} is not a gate: valid {', '.join(GATES)}")
            values["gate"] = raw["gate"]
        mode = raw.get("mode")
        if mode is None:
            if "pad_bytes" in raw and "blocks" in raw:
                raise UsageError(
                    "CCOVERLAP_PAD_BYTES and CCOVERLAP_BLOCKS are both set: choose one, or set CCOVERLAP_MODE"
                )
            mode = "pad" if "pad_bytes" in raw else "blocks" if "blocks" in raw else "off"
        elif mode not in MODES:
            raise UsageError(f"CCOVERLAP_MODE={mode} is not a mode: valid {', '.join(MODES)}")
        if mode == "pad" and "pad_bytes" not in raw:
            raise UsageError("CCOVERLAP_MODE=pad needs CCOVERLAP_PAD_BYTES")
        if mode == "blocks" and "blocks" not in raw:
            raise UsageError("CCOVERLAP_MODE=blocks needs CCOVERLAP_BLOCKS")
        for field in _REGEX_FIELDS:
            if field in raw:
                _check_regex(ENV[field], raw[field])
        return cls(mode=mode, **values)

    def to_environ(self) -> dict[str, str]:
        """Environment variables that give the library exactly this policy."""
        return {ENV[f]: str(v) for f, v in vars(self).items() if v is not None}


def _parse_drain(text: str) -> int | None:
    lo, hi = DRAIN_RANGE
    if text == "auto":
        return None
    if not _WHOLE.fullmatch(text):
        raise UsageError(f"CCOVERLAP_DRAIN={text} is not auto or a whole number: valid auto or {lo}..{hi}")
    if not lo <= int(text) <= hi:
        raise UsageError(f"CCOVERLAP_DRAIN={int(text)} is out of range: valid auto or {lo}..{hi}")
    return int(text)


def _read_policy_file(path: str) -> dict[str, str]:
    """A flat JSON object of the policy fields; the library accepts the same files."""
    where = f"{POLICY_ENV}={path}"
    try:
        with open(path, "rb") as f:
            data = f.read(_POLICY_FILE_MAX + 1)
    except OSError as exc:
        raise UsageError(f"{where}: cannot read it ({exc.strerror})") from None
    if len(data) > _POLICY_FILE_MAX:
        raise UsageError(f"{where}: larger than 64 KiB")
    try:
        text = data.decode()
        obj = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{where}: malformed JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: not a JSON object")
    if "\\u" in text:
        raise UsageError(f"{where}: \\u escapes are not supported")
    out = {}
    for key, value in obj.items():
        if key not in ENV:
            raise UsageError(f'{where}: unknown key "{key}": valid {", ".join(ENV)}')
        numeric = key in RANGES
        if key == "drain":
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise UsageError(f'{where}: "drain" must be a whole number or "auto"')
        elif numeric and not (isinstance(value, int) and not isinstance(value, bool)):
            raise UsageError(f'{where}: "{key}" must be a whole number')
        if not numeric and key != "drain" and not isinstance(value, str):
            raise UsageError(f'{where}: "{key}" must be a string')
        out[key] = str(value)
    return out


_REG_EXTENDED, _REG_NOSUB = 1, 8  # glibc <regex.h>


def _check_regex(var: str, pattern: str) -> None:
    """Compile with the C library's regcomp, as the interposer does (POSIX extended, not Python's re)."""
    libc = ctypes.CDLL(None)
    regex_t = ctypes.create_string_buffer(256)  # glibc's regex_t is 64 bytes
    rc = libc.regcomp(regex_t, pattern.encode(), _REG_EXTENDED | _REG_NOSUB)
    if rc != 0:
        why = ctypes.create_string_buffer(128)
        libc.regerror(rc, regex_t, why, len(why))
        raise UsageError(f"{var}={pattern} is not a valid POSIX extended regex: {why.value.decode()}")
    libc.regfree(regex_t)


@cache
def _switch():
    """The preloaded interposer's ccoverlap_set_policy, or None; looked up once (the lab switches
    around every repetition)."""
    fn = getattr(ctypes.CDLL(None), "ccoverlap_set_policy", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_int]
        fn.restype = ctypes.c_int
    return fn


def preloaded() -> bool:
    """Is the interposer loaded into this process (so set_policy can switch it)?"""
    return _switch() is not None


def set_policy(mode: str, value: int | None = None) -> None:
    """Switch the interposer preloaded into this process to `mode`, at once, for every thread.

    `value` is the pad in bytes for "pad" and the blocks per SM for "blocks" (same ranges as
    Policy), and must be None for "off" and "auto". The other fields keep what the process
    started with; memoised decisions are dropped, stats keep counting. For programs that run
    several strategies in one process (`ccoverlap run --mode off -- python lab.py`).
    """
    if mode not in MODES:
        raise UsageError(f"mode {mode!r} is not a mode: valid {', '.join(MODES)}")
    field = {"pad": "pad_bytes", "blocks": "blocks"}.get(mode)
    if field is None:
        if value is not None:
            raise UsageError(f"mode {mode} takes no value: only pad (bytes) and blocks (per SM) do")
        value = 0
    else:
        lo, hi = RANGES[field]
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"mode {mode} needs a whole number: {ENV[field]} valid {lo}..{hi}")
        check_range(ENV[field], value, lo, hi)
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
