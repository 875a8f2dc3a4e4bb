"""Runtime compilation of CUDA C to a cubin through NVRTC (ctypes; no CUDA Python package needed)."""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
from functools import cache

from ccoverlap.util.cache import cached
from ccoverlap.util.errors import UsageError


@cache
def _lib() -> ctypes.CDLL:
    candidates = []
    for root in sys.path:  # the nvidia-cuda-nvrtc wheel that torch installs
        candidates += sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libnvrtc.so*")))
        candidates += sorted(glob.glob(os.path.join(root, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*")))
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    candidates += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")))
    if found := ctypes.util.find_library("nvrtc"):
        candidates.append(found)
    for path in candidates:
        if "builtins" in os.path.basename(path) or "alt" in os.path.basename(path):
            continue
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    raise UsageError("NVRTC (libnvrtc.so) was not found: install the CUDA toolkit or torch's nvidia-cuda-nvrtc")


def compile_cubin(source: str, arch: str, options: tuple[str, ...] = ()) -> bytes:
    """Compile `source` for `arch` (e.g. 'sm_90') and return the cubin; raise with the log on error.
    Cached on disk by source, arch, options and NVRTC library."""
    key = "\0".join((source, arch, *options, _lib()._name))
    return cached("cubin", key, lambda: _compile(source, arch, options))


def _compile(source: str, arch: str, options: tuple[str, ...]) -> bytes:
    lib = _lib()
    prog = ctypes.c_void_p()
    _check(lib, lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"ccoverlap.cu", 0, None, None))
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17", *(o.encode() for o in options)]
        rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        if rc != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"NVRTC failed ({rc}):\n{log.value.decode(errors='replace')}")
        size = ctypes.c_size_t()
        _check(lib, lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)))
        cubin = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvrtcGetCUBIN(prog, cubin))
        return cubin.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _check(lib, rc: int) -> None:
    if rc != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(f"NVRTC error {rc}: {lib.nvrtcGetErrorString(rc).decode()}")
