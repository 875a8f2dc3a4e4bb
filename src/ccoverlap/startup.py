"""Start-up levers (Setting.startup, e.g. sm-carveout) in a program ccoverlap does not write:
`ccoverlap run --strategy` puts `hook/` first on PYTHONPATH, whose sitecustomize calls `install()`
in every Python process of the command. The calls are made when the process first imports torch
(they are torch calls), before it can start GPU work; a process that never imports torch is left
alone. A call that fails says so in one line on stderr, naming the process: never a silent no-op.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
from collections.abc import Mapping

from ccoverlap import levers

#: JSON of the start-up calls (name in levers.STARTUP_CALLS -> argument) for the hook to make
STARTUP_ENV = "CCOVERLAP_STARTUP"
HOOK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hook")


def auto_sms(environ: Mapping[str, str], sm_count: int) -> int:
    """`auto` of a start-up lever: the SMs NCCL's collective CTAs need under the NCCL knobs in `environ`."""
    from ccoverlap import nccl

    return levers.comm_sms(nccl.Knobs.from_env(environ).channels(), sm_count)


def environ(startup: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
    """The variables that make the hook run `startup` in every Python process started with `base` + them:
    the calls, and the hook's folder first on PYTHONPATH (the user's PYTHONPATH kept after it)."""
    kept = [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != HOOK_DIR]
    return {STARTUP_ENV: json.dumps(dict(startup)), "PYTHONPATH": os.pathsep.join([HOOK_DIR, *kept])}


def apply(environ: Mapping[str, str] = os.environ) -> None:
    """Make the calls in `environ`; `auto` sized for the first visible GPU (read through the driver: no context)."""
    calls = json.loads(environ[STARTUP_ENV])
    sms = 0  # no call takes `auto`: no GPU needed to size it
    if "auto" in calls.values():
        from ccoverlap import cuda_driver as cu

        if (drv := cu.driver()) is None:
            raise RuntimeError("no CUDA driver: `auto` needs a GPU's SM count")
        sms = drv.device_attribute(cu.ATTR_MULTIPROCESSOR_COUNT, drv.device(0))
    levers.run_startup(calls, auto_sms(environ, sms) if sms else 0)


def _apply_or_say() -> None:
    try:
        apply()
    except Exception as exc:  # noqa: BLE001 - the user's program runs on; the line says what was not applied
        print(f"ccoverlap: start-up levers {os.environ.get(STARTUP_ENV)} not applied in pid {os.getpid()} "
              f"({sys.executable}): {type(exc).__name__}: {exc}", file=sys.stderr)


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds torch as the rest of sys.meta_path does, and makes the calls once its import has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # once; and find_spec below must not come back here
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_then_apply(module):
                run(module)
                _apply_or_say()

            spec.loader.exec_module = exec_then_apply  # this spec's own loader instance
        return spec


def install() -> None:
    """Called by the hook: make the calls as torch is imported (at once if it already is)."""
    if STARTUP_ENV not in os.environ:
        return
    if "torch" in sys.modules:
        _apply_or_say()
    elif not any(isinstance(f, _AfterTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTorch())
