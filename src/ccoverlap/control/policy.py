"""A tuned policy: the combination of levers (levers.py) and user environment knobs that `ccoverlap tune`
found best for a command, as a file, and the two ways of applying it: `ccoverlap run --config FILE -- CMD`
(everything, the interposer and start-up calls included, in a fresh process: control/launch.py) and
`ccoverlap.enable(FILE)` inside a running script (what a running process can still take: variables read
later, start-up calls).

The levers, the knobs and the communication regex the tuner was given are the policy; the variables,
interposer fields and start-up calls a file also shows are derived from them, and a file whose shown values
differ was edited inconsistently. A trial of the tuner and `run --config` of the file it wrote start the
command with the same Launch, so the command sees the same variables.
"""
from __future__ import annotations

import json
import os
import re
from fnmatch import fnmatchcase
import shlex
import sys
import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from ccoverlap.control import interposer, launch, levers
from ccoverlap.model import comm
from ccoverlap.util.errors import UsageError
from ccoverlap.util.inputs import open_regular
from ccoverlap.util.output import write_json

FORMAT = "ccoverlap-policy/1"
#: the keys of a policy file; any other key is free-form metadata (the tuner's speedup, command, date...)
KEYS = ("format", "name", "levers", "knobs", "comm_regex", "env", "policy", "startup")
_DERIVED = ("name", "env", "policy", "startup")  # shown in the file for people, checked on load
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: a policy file is a few hundred bytes; past this it is not one (and json would spend its time on it)
MAX_BYTES = 1 << 20
#: digits of a number in a policy file (Python refuses to read an int of more than 4300)
MAX_DIGITS = 100

#: The variables a policy's knobs may set (name or fnmatch pattern -> what it tunes), besides its levers' own.
#: A policy travels (tuned once, applied on a cluster, passed between colleagues), so it must be data: a knob
#: such as LD_PRELOAD, PYTHONPATH, BASH_ENV or PATH would run code in the program, and NCCL_NET_PLUGIN or a
#: variable naming a file would load a library or write where the file says. Every other name, and any name
#: holding FILE, PATH, DIR, PLUGIN or LIB (_NAMES_A_FILE), is refused on load unless the user allows it by name
#: (`run --allow-env`, `enable(allow_env=...)`). docs/tune.md lists this table (tests/test_tuned.py checks it).
TUNING_VARIABLES: Mapping[str, str] = MappingProxyType({
    **dict.fromkeys(("NCCL_ALGO", "NCCL_PROTO", "NCCL_NTHREADS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS",
                     "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_CGA_CLUSTER_SIZE", "NCCL_CTA_POLICY",
                     "NCCL_BUFFSIZE", "NCCL_NVLS_CHUNKSIZE", "NCCL_P2P_LEVEL",
                     "NCCL_P2P_DISABLE", "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_P2P_NET_CHUNKSIZE", "NCCL_SHM_DISABLE",
                     "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ", "NCCL_CROSS_NIC", "NCCL_IB_QPS_PER_CONNECTION",
                     "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_PXN_DISABLE", "NCCL_LAUNCH_MODE",
                     "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_WORK_FIFO_BYTES", "NCCL_LL128_ENABLE"), "NCCL's tuning"),
    "TORCH_NCCL_*": "PyTorch's NCCL process groups",
    **dict.fromkeys(("CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_DEVICE_MAX_COPY_CONNECTIONS", "CUDA_MODULE_LOADING",
                     "CUDA_LAUNCH_BLOCKING"), "CUDA's launches"),
    **dict.fromkeys(("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"), "thread pools"),
})
_NAMES_A_FILE = re.compile(r"FILE|PATH|DIR|PLUGIN|LIB")
#: how a refused knob is allowed, by caller (`{}`: the variable's name)
RUN_ALLOW = "--allow-env {}"
ENABLE_ALLOW = "ccoverlap.enable(..., allow_env=[{!r}])"


def is_tuning_variable(name: str) -> bool:
    """Is `name` in TUNING_VARIABLES (and names no file)?"""
    return not _NAMES_A_FILE.search(name) and any(fnmatchcase(name, pattern) for pattern in TUNING_VARIABLES)


@dataclass(frozen=True)
class TunedPolicy:
    """Levers (registry names and values, in order) and knobs (environment variable -> value, in order)."""

    levers: tuple[tuple[str, str], ...] = ()
    knobs: tuple[tuple[str, str], ...] = ()
    #: kernels the tuner was told are communication too (the interposer's comm field); one tuning gives it to
    #: every trial alike, so it is no part of a candidate's identity
    comm_regex: str | None = field(default=None, compare=False)
    meta: Mapping[str, object] = field(default_factory=dict, compare=False)  # the tuner's notes, kept on load

    def __post_init__(self) -> None:
        """Every TunedPolicy is valid: values normalised by the registry, knobs well formed, no conflict."""
        seen = set()
        for name, value in self.levers:
            if name in seen:
                raise UsageError(f"lever {name} named twice")
            seen.add(name)
            if not isinstance(value, str):
                raise UsageError(f"lever {name}: the value must be a string, not {value!r}")
        object.__setattr__(self, "levers", tuple((n, levers.lever(n).value(v)) for n, v in self.levers))
        names = [name for name, _ in self.knobs]
        for name, value in self.knobs:
            if not isinstance(name, str) or not _VARIABLE.fullmatch(name):
                raise UsageError(f"knob {name!r}: not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
            if not isinstance(value, str) or "\0" in value or "\n" in value:
                raise UsageError(f"knob {name}={value!r}: the value must be a string without NUL or newline")
            if names.count(name) > 1:
                raise UsageError(f"knob {name} given twice")
        if self.comm_regex is not None:
            comm.check(self.comm_regex, "comm_regex")
        self.setting()  # conflicts are bad input now, not at launch

    @classmethod
    def of(cls, strategy: levers.Strategy | str, knobs: Mapping[str, str] = MappingProxyType({}),
           comm_regex: str | None = None) -> TunedPolicy:
        s = levers.strategy(strategy) if isinstance(strategy, str) else strategy
        if s.no_overlap:
            raise UsageError(f"{s.name} is the bench's baseline (its workloads wait for each collective), "
                             "not a setting: a policy is levers and knobs")
        return cls(s.levers, tuple(knobs.items()), comm_regex)

    @property
    def strategy(self) -> levers.Strategy:
        return levers.Strategy(self.levers)

    @property
    def name(self) -> str:
        parts = ([self.strategy.name] if self.levers else []) + [f"{k}={v}" for k, v in self.knobs]
        return "+".join(parts) or levers.DEFAULT

    def setting(self) -> levers.Setting:
        """What the levers set, with the knobs added to their variables and, where the interposer runs, the
        communication regex to its policy; a knob that sets a variable a lever sets to another value is a
        UsageError naming both."""
        own = self.strategy.setting()
        for var, value in self.knobs:
            if own.env.get(var, value) != value:
                by = next(n for n, v in self.levers if var in levers.BY_NAME[n].setting(v).env)
                raise UsageError(f"knob {var}={value} conflicts with lever {by}, which sets {var}={own.env[var]}")
        comm = {"comm": self.comm_regex} if own.policy and self.comm_regex else {}
        return own.merged(levers.Setting(env=dict(self.knobs), policy=comm), f"policy {self.name}")

    @property
    def env(self) -> dict[str, str]:
        return dict(self.setting().env)

    @property
    def policy(self) -> dict[str, str]:
        """The launch interposer's policy fields (JSON key -> value)."""
        return dict(self.setting().policy)

    @property
    def startup(self) -> dict[str, str]:
        """Start-up calls (name in levers.STARTUP_CALLS -> argument)."""
        return dict(self.setting().startup)

    def not_applicable(self, host: levers.Host) -> str | None:
        """`lever: reason` for the first lever that does not apply on `host` in a fresh process, or None."""
        return self.strategy.not_applicable(host, "process")

    def launch(self, **how) -> launch.Launch:
        """The launch that runs a command under this policy, as the tuner's trials and `run --config` do
        (`how`: the rest of launch.Launch's fields): the launch interposer preloaded, in pass-through where the
        policy has no field of it, because the tuner measures every trial so (its stats show each lever's mark)."""
        return launch.Launch(self.setting(), **({"interposer": True} | how))

    def to_dict(self, **meta) -> dict:
        if clash := (set(meta) | set(self.meta)) & set(KEYS):
            raise ValueError(f"metadata may not use the policy's own keys: {', '.join(sorted(clash))}")
        return {"format": FORMAT, "name": self.name, "levers": dict(self.levers), "knobs": dict(self.knobs),
                "comm_regex": self.comm_regex, "env": self.env, "policy": self.policy, "startup": self.startup} \
            | dict(self.meta) | meta

    @classmethod
    def from_dict(cls, d: object, where: str, allow_env: Collection[str] = (), how: str = RUN_ALLOW) -> TunedPolicy:
        """The policy in `d` (as in a file); a UsageError of one line naming `where` and the problem. A knob
        outside TUNING_VARIABLES is refused unless named in `allow_env` (`how`: how the user allows it)."""
        try:
            return cls._from_dict(d)._allowing(allow_env, how)
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None

    def _allowing(self, allow_env: Collection[str], how: str) -> TunedPolicy:
        for name, _ in self.knobs:
            if name not in allow_env and not is_tuning_variable(name):
                raise UsageError(f"knob {name} is not a tuning variable a policy may set (it could run code or name "
                                 f"a file; the tuning variables: docs/tune.md); to trust this policy with it, give "
                                 f"{how.format(name)}")
        return self

    @classmethod
    def _from_dict(cls, d: object) -> TunedPolicy:
        if not isinstance(d, Mapping):
            raise UsageError(f"a policy is a JSON object, not {type(d).__name__}")
        if d.get("format") != FORMAT:
            raise UsageError(f"format {d.get('format')!r} is not {FORMAT!r}" if "format" in d
                             else f"no format key ({FORMAT!r})")
        parts = {}
        for key in ("levers", "knobs"):
            value = d.get(key, {})
            if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
                raise UsageError(f"{key} must be an object of names to string values")
            parts[key] = tuple(value.items())
        if not isinstance(regex := d.get("comm_regex"), str | None):
            raise UsageError(f"comm_regex must be a string or null, not {type(regex).__name__}")
        out = cls(**parts, comm_regex=regex, meta={k: v for k, v in d.items() if k not in KEYS})
        derived = out.to_dict()
        for key in _DERIVED:
            if key in d and d[key] != derived[key]:
                raise UsageError(f"edited inconsistently: its {key} is not what its levers and knobs set "
                                 f"({json.dumps(derived[key])}); change levers or knobs, and drop {key}")
        return out

    def save(self, path: str | os.PathLike, **meta) -> Path:
        """Write the policy (and `meta`) to `path` atomically: a reader never sees half a file."""
        return write_json(path, self.to_dict(**meta), indent=2)


def load(path: str | os.PathLike, allow_env: Collection[str] = (), how: str = RUN_ALLOW) -> TunedPolicy:
    """The policy in the file at `path`; a UsageError of one line naming the file and the problem (`allow_env`,
    `how`: as for TunedPolicy.from_dict)."""
    try:
        with open_regular(path, "a policy file") as f:
            text = f.read(MAX_BYTES + 1).decode()
    except UsageError as exc:  # a FIFO, a device, a directory: never opened
        raise UsageError(f"{path}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the policy ({getattr(exc, 'strerror', None) or exc})") from None
    if len(text) > MAX_BYTES:
        raise UsageError(f"{path}: larger than {MAX_BYTES >> 20} MiB: not a policy file")
    try:
        d = json.loads(text, object_pairs_hook=_unique_keys, parse_int=_bounded_int, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to be a policy file") from None
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None
    return TunedPolicy.from_dict(d, str(path), allow_env, how)


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise UsageError(f"a number of {len(text.lstrip('-'))} digits (at most {MAX_DIGITS})")
    return int(text)


def _no_constant(text: str):
    raise UsageError(f"{text} is not JSON")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object that names a key once (a lever written twice is a mistake, not the last one wins)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise UsageError(f"key {next(k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i]))!r} given twice")
    return out


# --- in a fresh process: `ccoverlap run` ---------------------------------------------------------

def applying(policy: TunedPolicy, source: str, given: Mapping[str, str], whole: bool,
             host: levers.Host | None = None) -> launch.Launch:
    """The launch that applies `policy` (named `source` in errors) with the interposer options `given` (policy
    key -> value) on top; UsageError where one of its levers does not apply on `host` (this machine) or an
    option disagrees with one of its policy fields."""
    if reason := policy.not_applicable(host or levers.Host.detect()):
        raise UsageError(f"{source}: {reason}")
    for key, value in policy.policy.items():
        field_ = interposer.BY_KEY[key]
        if key in given and _normal(field_, given[key]) != _normal(field_, value):
            raise UsageError(f"{field_.option} {given[key]} disagrees with {source}, which sets {key} {value}")
    return policy.launch(fields=dict(given), whole=whole, interposer=whole)  # a whole policy: as the tuner measured it


def for_run(config: str | None, strategy: str | None, given: Mapping[str, str], host: levers.Host | None = None,
            allow_env: Collection[str] = ()) -> launch.Launch:
    """`ccoverlap run`'s launch: a tuned policy file as the tuner ran it (a whole policy; knobs outside
    TUNING_VARIABLES only where named in `allow_env`), a strategy's levers layered over the caller's interposer
    variables, or the interposer with the options `given` alone."""
    if allow_env and config is None:
        raise UsageError("--allow-env: only with --config (it lets a policy file's knob set that variable)")
    if config is not None:
        if strategy is not None:
            raise UsageError("--config and --strategy: give one (a policy file names its own levers)")
        return applying(load(config, allow_env), f"--config {config}", given, whole=True, host=host)
    if strategy is not None:
        s = levers.strategy(strategy)
        if s.no_overlap:
            raise UsageError(f"--strategy {s.name}: the bench's baseline (its workloads wait for each collective); "
                             "it cannot be applied to a program")
        return applying(TunedPolicy.of(s), f"--strategy {s.name}", given, whole=False, host=host)
    return launch.Launch(fields=dict(given), whole=False, interposer=True)


def _normal(f: interposer.Field, value: str) -> int | str:
    """A policy value as the library compares it, so that 100 and 0100 agree (the whole policy is checked later)."""
    text = value.strip()
    return int(text) if f.kind.startswith("int") and text.isdigit() and len(text) < 20 else text


# --- inside a running script -----------------------------------------------------------------------

def enable(policy: str | os.PathLike | TunedPolicy | Mapping, allow_env: Collection[str] = ()) -> TunedPolicy:
    """Apply `policy` (a file, a TunedPolicy, or a dict as in the file) to this running process, as far as a
    running process can take it, and return it. Call it before `init_process_group`. A file's or dict's knob
    outside TUNING_VARIABLES is refused unless named in `allow_env`.

    - Its variables are set in os.environ. PyTorch reads TORCH_NCCL_HIGH_PRIORITY each time a process group
      creates an NCCL communicator (ProcessGroupNCCL.cpp, initNCCLComm: `force_high =
      getCvarBool(TORCH_NCCL_HIGH_PRIORITY, false); getStreamFromPool(options_->is_high_priority_stream ||
      force_high)`; getCvarBool reads the environment on every call, c10d/Utils.hpp:151 in torch 2.13.0),
      at a group's first collective (or at once with device_id): every NCCL group whose communicator is made
      afterwards gets a high-priority stream, FSDP's and DeviceMesh's included, although each group's
      options keep is_high_priority_stream False (distributed_c10d.py:2194-2196 in torch 2.13.0). NCCL
      reads its own NCCL_* variables as it creates a communicator too.
    - Its start-up calls are made now (as `ccoverlap run`'s hook makes them at `import torch`).
    - Its interposer fields cannot be applied: the interposer must be preloaded when the process starts.
      Then one warning gives the `ccoverlap run --config` command to use instead.
    A bad policy is a UsageError; nothing else raises: what is not applied is a warning (UserWarning).
    """
    path = None
    if isinstance(policy, TunedPolicy):
        p = policy
    elif isinstance(policy, Mapping):
        p = TunedPolicy.from_dict(policy, "ccoverlap.enable", allow_env, ENABLE_ALLOW)
    else:
        path = os.path.abspath(policy)
        p = load(path, allow_env, ENABLE_ALLOW)
    if reason := p.not_applicable(levers.Host.detect()):
        _warn(f"policy {p.name} does not apply here ({reason}): nothing applied")
        return p
    if _distributed_initialized():
        _warn("torch.distributed is already initialised: the policy's variables reach only the NCCL communicators "
              "created from now on; a process group that already ran a collective (or was created with device_id) "
              "keeps its stream priority and NCCL settings. Call ccoverlap.enable() before init_process_group")
    try:
        launch.in_process(p.setting())
    except Exception as exc:  # noqa: BLE001 - the script runs on; the warning says what was not done
        _warn(f"start-up calls {json.dumps(p.startup)} not made: {type(exc).__name__}: {exc}")
    if p.policy and not interposer_loaded():
        fields = ", ".join(f"{k} {v}" for k, v in p.policy.items())
        config = path or "POLICY.json"
        save = "" if path else f" (save it first: ccoverlap.enable(...).save({config!r}))"
        _warn(f"policy {p.name}: interposer fields {fields} not applied: the launch interposer is not loaded in "
              f"this process (it must be preloaded at start). Run instead{save}: "
              f"ccoverlap run --config {shlex.quote(config)} -- {shlex.join([sys.executable, *sys.argv])}")
    return p


def _warn(text: str) -> None:
    warnings.warn(f"ccoverlap.enable: {text}", UserWarning, stacklevel=3)


def interposer_loaded(maps: str = "/proc/self/maps") -> bool:
    """Is the launch interposer's library mapped into this process?"""
    try:
        lib = os.path.realpath(interposer.library_path())
    except UsageError:  # not built: not loaded either
        return False
    try:
        with open(maps) as f:
            return any(line.rstrip("\n").endswith(lib) for line in f)
    except OSError:  # no /proc: ask the loader for its switch instead
        return interposer.preloaded()


def _distributed_initialized() -> bool:
    """torch.distributed initialised, without importing torch where the script has not."""
    dist = sys.modules.get("torch.distributed")
    return bool(dist and dist.is_available() and dist.is_initialized())
