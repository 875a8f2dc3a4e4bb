"""What a communication kernel is: one definition, the C library's (csrc/policy.c: ccov_comm_kernels, a POSIX
extended regex), asked through ctypes. The interposer never pads such a kernel and the doctor's analysis counts
it as communication; a user's regex (`--comm-regex`, the interposer's `--comm`) adds to it, in the same
dialect, compiled by the same regcomp, so that no name is communication to one and compute to the other.
"""
from __future__ import annotations

import ctypes
import os

from ccoverlap.model import _native
from ccoverlap.util.errors import UsageError

#: the built-in pattern (matched in any case, anywhere in a kernel's name)
BUILTIN = ctypes.c_char_p.in_dll(_native.lib(), "ccov_comm_kernels").value.decode()


class CommKernels:
    """The communication kernels: the built-in ones and those matching `regex` (None: none; named `flag` in
    errors). A regex the C library does not compile is a UsageError of one line, before any work."""

    def __init__(self, regex: str | None = None, flag: str = "--comm-regex"):
        err = ctypes.create_string_buffer(256)
        lib = _native.lib()
        if regex is not None and "\0" in regex:
            raise UsageError(f"{flag} {regex!r}: a regex cannot hold NUL")
        handle = lib.ccov_comm_new(None if regex is None else os.fsencode(regex), err, len(err))
        if not handle:
            raise UsageError(f"{flag} {regex!r} is not a POSIX extended regex: {err.value.decode(errors='replace')}")
        self.regex = regex
        self._handle, self._free, self._is = handle, lib.ccov_comm_free, lib.ccov_comm_is
        self._seen: dict[str, bool] = {}

    def __call__(self, name: str) -> bool:
        """Is a kernel of this name communication? (Remembered by name: a trace names few kernels many times.)"""
        if (known := self._seen.get(name)) is None:
            known = self._seen[name] = bool(self._is(self._handle, name.encode(errors="surrogateescape")))
        return known

    def __del__(self) -> None:
        if getattr(self, "_handle", None):
            self._free(self._handle)
            self._handle = None


def check(regex: str | None, flag: str = "--comm-regex") -> str | None:
    """`regex` where the C library compiles it (None stays None); else a UsageError of one line naming `flag`."""
    if regex is not None:
        CommKernels(regex, flag)
    return regex
