"""Child processes ccoverlap starts and must never leave behind: ranks of the bench, trials of the tuner.

Each child leads a process group of its own, so a signal reaches what it started (torchrun's workers); the
kernel kills it when its parent dies, even of SIGKILL (PR_SET_PDEATHSIG); SIGINT and SIGTERM to ccoverlap
become `Stopped`, which unwinds through every clean-up on the way.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """In a child (a preexec_fn, or a rank's first call): the kernel sends `sig` when the parent dies (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


class Stopped(BaseException):
    """SIGINT or SIGTERM reached the bench. A BaseException, so that nothing on the way catches it:
    unwinding stops every rank and removes its folder."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Inside, SIGINT and SIGTERM raise Stopped in the main thread, once: later ones are ignored
    while the bounded clean-up runs. The handlers before are restored after."""

    def handler(signum, frame):
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        raise Stopped(signum)

    before = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


#: seconds a rank has to end after a forwarded SIGINT or SIGTERM before it is killed
GRACE_S = 5.0


def stop(procs: list[subprocess.Popen], signum: int, grace_s: float = GRACE_S) -> None:
    """Send `signum` to every rank (its whole process group, so torchrun's workers too), give
    them `grace_s` to end, then kill what remains and reap them all."""
    for p in procs:
        _signal(p, signum)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        _signal(p, signal.SIGKILL)
        p.wait()


def _signal(p: subprocess.Popen, signum: int) -> None:
    """`signum` to p's process group where p leads one, else to p alone. Nothing once p is reaped:
    its pid may then be another's (until then, even a zombie's pid is not reused)."""
    if p.poll() is not None:
        return
    try:
        if os.getpgid(p.pid) == p.pid:
            os.killpg(p.pid, signum)
        else:
            p.send_signal(signum)
    except ProcessLookupError:
        pass


def exit_for(signum: int) -> int:
    """SIGINT: exit 130, as shells report it; SIGTERM: die of it, so whoever sent it sees it did."""
    if signum == signal.SIGINT:
        return 130
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return 128 + signum


def ending(code: int) -> str:
    """How a child with return code `code` ended, in words: `exit code 3`, `signal SIGKILL`."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
