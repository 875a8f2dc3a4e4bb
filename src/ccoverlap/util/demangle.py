"""C++ symbols as Kineto writes them: the driver (and so the launch interposer's stats) names kernels mangled,
torch's profiler demangles them with abi::__cxa_demangle; the same call here lets the two meet."""
from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache, lru_cache


@cache
def _cxa_demangle():
    name = ctypes.util.find_library("stdc++")
    try:
        fn = ctypes.CDLL(name or "libstdc++.so.6").__cxa_demangle
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    fn.restype = ctypes.c_void_p
    return fn


@lru_cache(maxsize=4096)
def demangled(name: str) -> str:
    """A C++ symbol as Kineto shows it (abi::__cxa_demangle, as torch's profiler does); other names unchanged."""
    fn = _cxa_demangle()
    if fn is None or not name.startswith("_Z"):
        return name
    status = ctypes.c_int()
    out = fn(name.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not out:
        return name
    try:
        return ctypes.string_at(out).decode(errors="replace")
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(out))
