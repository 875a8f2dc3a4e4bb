"""Provenance for every recorded result: which GPU, driver, CUDA, torch and NCCL, which command, which
commit of ccoverlap (or its version)."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from ccoverlap.gpu import cuda_driver

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # src/ccoverlap
UNKNOWN = "unknown"


def source_commit(package_dir: Path = PACKAGE_DIR) -> str:
    """The commit of the git checkout that holds ccoverlap's own source, or "unknown".

    Asked of the package's directory, not the working directory, and only if that repository
    tracks the package's __init__.py: a copy of the package that sits inside some other
    repository (unpacked, or installed into a virtual environment there) is not that
    repository's commit. CCOVERLAP_COMMIT overrides it, for runs from a copy without git history.
    """
    if commit := os.environ.get("CCOVERLAP_COMMIT"):
        return commit
    try:
        _git(package_dir, "ls-files", "--error-unmatch", "__init__.py")  # fails unless tracked there
        return _git(package_dir, "rev-parse", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True,
                          timeout=10).stdout.strip()


def package_version() -> str:
    """The installed ccoverlap's version (what identifies the code when the commit is unknown)."""
    try:
        return metadata.version("ccoverlap")
    except metadata.PackageNotFoundError:
        return UNKNOWN


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
        "commit": source_commit(),
        "version": package_version(),
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
