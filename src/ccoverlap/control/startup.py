"""The start-up hook: work done inside a program ccoverlap does not write. A launch (control/launch.py) with
jobs puts `hook/` first on PYTHONPATH, whose sitecustomize calls `install()` in every Python process of the
command, and sets the variable of each job (JOBS): the start-up levers (Setting.startup, e.g. sm-carveout:
`ccoverlap run`, the tuner's trials, the bench's ranks) and the doctor's capture (the doctor, the trials).
The jobs run when the process first imports torch (they are torch calls), before it can start GPU work; a
process that never imports torch is left alone. A job that fails says so in one line on stderr, naming the
process: never a silent no-op; `failed()` tells a program that must not run on without it (a bench rank).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import json
import os
import sys
from collections.abc import Mapping

from ccoverlap.control import levers
from ccoverlap.gpu import cuda_driver as cu
from ccoverlap.model import nccl

#: JSON of the start-up calls (name in levers.STARTUP_CALLS -> argument) for the hook to make
STARTUP_ENV = "CCOVERLAP_STARTUP"
#: JSON of the doctor's capture (doctor.config.CaptureConfig.job())
DOCTOR_ENV = "CCOVERLAP_DOCTOR"
HOOK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hook")


def auto_sms(environ: Mapping[str, str], sm_count: int) -> int:
    """`auto` of a start-up lever: the SMs NCCL's collective CTAs need under the NCCL knobs in `environ`."""
    return levers.comm_sms(nccl.Knobs.from_env(environ).channels(), sm_count)


def environ(jobs: Mapping[str, object], base: Mapping[str, str]) -> dict[str, str]:
    """The variables that make the hook do `jobs` (variable of JOBS -> its value) in every Python process
    started with `base` + them: each value as JSON, and the hook's folder first on PYTHONPATH (the user's
    PYTHONPATH kept after it)."""
    if unknown := set(jobs) - set(JOBS):
        raise ValueError(f"not a job of the start-up hook: {', '.join(sorted(unknown))}")
    kept = [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != HOOK_DIR]
    return {var: json.dumps(value) for var, value in jobs.items()} | {"PYTHONPATH": os.pathsep.join([HOOK_DIR, *kept])}


def call(calls: Mapping[str, str], environ: Mapping[str, str] = os.environ) -> None:
    """Make the start-up calls `calls` in this process now; `auto` sized for the first visible GPU (read
    through the driver: no context) under the NCCL knobs in `environ`. For the hook and `ccoverlap.enable`."""
    sms = 0  # no call takes `auto`: no GPU needed to size it
    if "auto" in calls.values():
        if (drv := cu.driver()) is None:
            raise RuntimeError("no CUDA driver: `auto` needs a GPU's SM count")
        sms = drv.device_attribute(cu.ATTR_MULTIPROCESSOR_COUNT, drv.device(0))
    levers.run_startup(calls, auto_sms(environ, sms) if sms else 0)


#: the hook's jobs, in the order they run: variable -> (what it is, in words; "module:function" that does it,
#: given the variable's JSON). Named, not imported: the jobs' modules (the doctor's capture among them) sit above
#: the control plane and load only in a process that asks for them.
JOBS: dict[str, tuple[str, str]] = {
    STARTUP_ENV: ("start-up levers", "ccoverlap.control.startup:call"),
    DOCTOR_ENV: ("doctor capture", "ccoverlap.doctor.capture:install"),
}


#: the jobs this process ran: variable -> None (done) or why it failed
DONE: dict[str, str | None] = {}


def failed(variable: str) -> str | None:
    """Why the job of `variable` was not done in this process (never run: torch not imported, or the hook not
    on PYTHONPATH), or None where it was."""
    if variable not in DONE:
        return "the start-up hook did not run it"
    return DONE[variable]


def _run_jobs() -> None:
    for variable, (what, target) in JOBS.items():
        if variable not in os.environ:
            continue
        try:
            module, _, function = target.partition(":")
            getattr(importlib.import_module(module), function)(json.loads(os.environ[variable]))
            DONE[variable] = None
        except Exception as exc:  # noqa: BLE001 - the user's program runs on; the line says what was not done
            DONE[variable] = f"{type(exc).__name__}: {exc}"
            print(f"ccoverlap: {what} {os.environ.get(variable)} not applied in pid {os.getpid()} "
                  f"({sys.executable}): {DONE[variable]}", file=sys.stderr)


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds torch as the rest of sys.meta_path does, and runs the jobs once its import has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # once; and find_spec below must not come back here
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_then_run_jobs(module):
                run(module)
                _run_jobs()

            spec.loader.exec_module = exec_then_run_jobs  # this spec's own loader instance
        return spec


def install() -> None:
    """Called by the hook: run the jobs asked for as torch is imported (at once if it already is)."""
    if not any(variable in os.environ for variable in JOBS):
        return
    if "torch" in sys.modules:
        _run_jobs()
    elif not any(isinstance(f, _AfterTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTorch())
