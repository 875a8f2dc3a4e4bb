"""A forked child that must not outlive the process that forked it (the analysis's workers and second core): Linux's
PR_SET_PDEATHSIG; elsewhere nothing (the child ends when its work or its pipe does). Its signals are its own, not
the command's. The keeper does the same for its command in its own lines: it runs isolated, on the standard library
alone (control/keeper.py)."""
from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with(parent: int) -> None:
    """In a child just forked from `parent`: leave Ctrl-C to `parent` (it stops its children), die of SIGTERM and
    SIGHUP as any process does (the handlers it inherited unwind the parent's command: cli.main), be SIGKILLed
    when `parent` ends, and exit at once where it already has (it died before the request was made)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if callable(signal.getsignal(sig)):  # one ignored (nohup's SIGHUP) stays ignored
            signal.signal(sig, signal.SIG_DFL)
    if _libc is None:
        return
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
