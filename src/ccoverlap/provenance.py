"""Provenance for every recorded result: which GPU, driver, CUDA, torch and NCCL, which command, which commit."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys


def _git_commit() -> str | None:
    if commit := os.environ.get("CCOVERLAP_COMMIT"):
        return commit
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _torch_versions() -> dict:
    try:
        import torch
    except ImportError:
        return {"torch": None, "cuda": None, "nccl": None}
    nccl = None
    if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except (RuntimeError, AttributeError):
            nccl = None
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl}


def collect(**extra) -> dict:
    """A provenance record; `extra` adds run-specific fields (backend, world_size, ...)."""
    from ccoverlap import cuda_driver

    drv = cuda_driver.driver()
    gpu = driver = None
    if drv is not None:
        gpu = drv.device_name(drv.device(0))
        v = drv.driver_version()
        driver = f"CUDA driver API {v // 1000}.{v % 1000 // 10}"
    smi = _nvidia_smi_driver()
    return {
        "gpu": gpu,
        "driver": smi or driver,
        **_torch_versions(),
        "python": platform.python_version(),
        "host": platform.node(),
        "command": " ".join(sys.argv),
        "commit": _git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }


def _nvidia_smi_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, check=True, timeout=20,
        ).stdout.split()
        return out[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None
