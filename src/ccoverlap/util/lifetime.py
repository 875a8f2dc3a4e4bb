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


# --- the program's own end (cli.entry) ---
#: The process cli.entry runs the program in (0: none, as for a library caller or a test calling cli.main).
_program = 0
#: True once its command has said that nothing of its end needs the interpreter's teardown (analyze: its outputs
#: written, flushed and closed, its forked processes reaped, before it returns).
_at_once = False
#: What that process leaves to its exit to free (keep): one object at a time.
_held: list = []


def program() -> None:
    """In cli.entry: this process is the program's, which ends by leave()."""
    global _program
    _program = os.getpid()


def at_once() -> None:
    """In a command that leaves nothing to the interpreter's teardown: where it runs as the program (cli.entry),
    the process ends by os._exit once its streams are flushed and its atexit handlers have run (leave), and what
    it keeps (keep) is never freed object by object. Anywhere else (a test calling cli.main, a forked child),
    nothing."""
    global _at_once
    if _program == os.getpid():
        _at_once = True


def keep(obj: object) -> None:
    """Hold `obj` (None: nothing) until a process that ends at once ends: the trace model of 157 MB of trace took
    30 ms of one core to free, object by object, which os._exit returns whole. One at a time: the next call frees
    the one held before (a process that reads several traces in turn calls it with None before each: its memory
    stays one model's). Elsewhere nothing is held."""
    if _at_once and _program == os.getpid():
        _held[:] = [] if obj is None else [obj]


def leave(code: int) -> None:
    """The program's end with exit status `code`: where its command ended at once (at_once), no thread but this
    one runs and nothing is preloaded (LD_PRELOAD: a library's own exit work), its standard streams flushed, its
    atexit handlers run (multiprocessing's, the doctor's) and C's streams flushed, then os._exit: the
    interpreter's teardown (25 ms after analyze) and the freeing of what keep held are skipped. Otherwise, or where
    a stream cannot be flushed (a full disk, a closed pipe: the interpreter's own exit then says so as it always
    does), sys.exit(code)."""
    threading = sys.modules.get("threading")
    if (not _at_once or _program != os.getpid() or type(code) is not int or os.environ.get("LD_PRELOAD")
            or (threading is not None and threading.active_count() > 1)):
        sys.exit(code)
    if not _flushed():
        sys.exit(code)
    import atexit
    atexit._run_exitfuncs()  # each once: the interpreter's exit finds none left
    if not _flushed():
        sys.exit(code)
    if _libc is not None:
        _libc.fflush(None)
    os._exit(code)


def _flushed() -> bool:
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:  # noqa: BLE001 - the interpreter's exit flushes again and reports it
        return False
    return True
