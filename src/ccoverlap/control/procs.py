"""Child processes ccoverlap starts and must never leave behind: a user's command, a trial, a bench rank.

Each runs under a keeper of its own (control/keeper.py), a small process that is a child subreaper: the
command leads a process group of its own, dies with its keeper, and whatever it starts (torchrun's workers,
in sessions of their own) is the keeper's to end, when the command ends and, through a pipe the kernel closes,
when ccoverlap dies, even of SIGKILL. Signals sent to a Child go to the command's process group. SIGINT,
SIGTERM and SIGHUP to the tuner and the bench become `Stopped`, which unwinds through every clean-up.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

KEEPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "keeper.py")
#: seconds a command has to end after a forwarded signal (or the end of its leader) before it is killed
GRACE_S = 5.0
#: the signals a keeper passes on to its command's process group
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Child:
    """`argv` with environment `env` (the whole of it), started under its keeper; stdin, stdout, stderr as
    subprocess.Popen takes them. `returncode` as Popen's: the command's code, -N where signal N killed it."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], *, stdin=None, stdout=None, stderr=None,
                 cwd: str | None = None, grace_s: float = GRACE_S):
        control, self._control = os.pipe()
        self._status, status = os.pipe()
        try:  # an empty environment: the keeper must not load the command's preloads or hooks
            self._keeper = subprocess.Popen([sys.executable, "-I", "-S", KEEPER, str(control), str(status),
                                             ",".join(str(int(s)) for s in FORWARDED)], env={},
                                            stdin=stdin, stdout=stdout, stderr=stderr, pass_fds=(control, status),
                                            start_new_session=True)
        except BaseException:
            for fd in (self._control, self._status):
                os.close(fd)
            raise
        finally:
            os.close(control)
            os.close(status)
        self.returncode: int | None = None
        self.error: str | None = None  # why the command could not be started (as the keeper says it)
        spec = json.dumps({"argv": list(argv), "env": dict(env), "cwd": cwd, "grace_s": grace_s}).encode() + b"\n"
        with contextlib.suppress(BrokenPipeError):  # the keeper is gone already: its end says why
            view = memoryview(spec)
            while view:
                view = view[os.write(self._control, view):]

    @property
    def pid(self) -> int:
        """The keeper's pid (the command's parent)."""
        return self._keeper.pid

    def poll(self) -> int | None:
        return self._ended(self._keeper.poll())

    def wait(self, timeout: float | None = None) -> int:
        """The command's return code, once it and what it left running have ended; TimeoutExpired after `timeout`."""
        return self._ended(self._keeper.wait(timeout))

    def send_signal(self, signum: int) -> None:
        """`signum` (FORWARDED) to the command's process group through its keeper, unless it has ended; SIGKILL
        kills the command and everything it started."""
        if signum == signal.SIGKILL:
            self.kill()
            return
        if signum not in FORWARDED:
            raise ValueError(f"the keeper forwards {', '.join(s.name for s in FORWARDED)} and SIGKILL, not {signum}")
        if self._keeper.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._keeper.send_signal(signum)

    def kill(self) -> int:
        """End the command and everything it started at once (SIGKILL); its return code."""
        if self._control >= 0:
            os.close(self._control)  # the keeper kills every process below it
            self._control = -1
        return self.wait()

    def stop(self, signum: int = signal.SIGTERM, grace_s: float = GRACE_S) -> int:
        """`signum` to the command, `grace_s` for it to end, then kill(); its return code."""
        stop([self], signum, grace_s)
        return self.wait()

    def _ended(self, keeper: int | None) -> int | None:
        if keeper is None or self.returncode is not None:
            return self.returncode
        with os.fdopen(self._status, "rb") as f:  # the keeper has ended: every writer is closed
            lines = f.read().decode(errors="replace").splitlines()
        if self._control >= 0:
            os.close(self._control)
            self._control = -1
        code = keeper  # the keeper itself was killed: that is all there is to say
        for line in lines:
            what, _, value = line.partition(" ")
            if what == "error":
                self.error = value
            elif what in ("exit", "signal"):
                code = int(value) if what == "exit" else -int(value)
        self.returncode = code
        return code

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc) -> None:
        if self.returncode is None:
            self.kill()


def stop(children: Sequence[Child], signum: int, grace_s: float = GRACE_S) -> None:
    """`signum` to every child (its whole process group: torchrun, which tells its workers), `grace_s` for them
    to end, then kill what remains; every one of them has ended on return."""
    for c in children:
        c.send_signal(signum)
    deadline = time.monotonic() + (grace_s if signum != signal.SIGKILL else 0)
    for c in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            c.wait(max(deadline - time.monotonic(), 0))
    for c in children:
        c.kill()


class Stopped(BaseException):
    """SIGINT, SIGTERM or SIGHUP reached the tuner or the bench. A BaseException, so that nothing on the way
    catches it: unwinding stops every child and removes its folder."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Inside, SIGINT, SIGTERM and SIGHUP raise Stopped in the main thread, once: later ones are ignored
    while the bounded clean-up runs. A signal ignored on entry stays ignored (`nohup`'s SIGHUP, a background
    job's SIGINT). The handlers before are restored after."""

    def handler(signum, frame):
        for s in before:
            signal.signal(s, signal.SIG_IGN)
        raise Stopped(signum)

    before = {s: signal.signal(s, handler) for s in STOP_SIGNALS if signal.getsignal(s) != signal.SIG_IGN}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def exit_for(signum: int) -> int:
    """The end of ccoverlap stopped by `signum`: SIGINT exits 130, as shells report it; another signal: die of
    it, so whoever sent it sees it did."""
    return 130 if signum == signal.SIGINT else die_of(signum)


def end_as(code: int) -> int:
    """The exit code that ends ccoverlap as a command with return code `code` ended: the code itself, or, for
    -N, death by signal N."""
    return die_of(-code) if code < 0 else code


def die_of(signum: int) -> int:
    """Die of `signum`, its default action restored (SIGKILL, the OOM killer's, has no handler to reset); 128 +
    signum, as a shell reports it, where that action does not end a process (SIGCHLD, SIGWINCH)."""
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(OSError, ValueError):
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


_TRACEBACK = "Traceback (most recent call last):"
_PREFIX = re.compile(r"^(\[[\w:.-]+\]:\s?)?")  # torchrun's --tee and log-line-prefix: "[rank0]: ", "[default0]:"
#: exceptions that are a launcher's summary of a failed child (torchrun's "Root Cause ... error_file: <N/A>"):
#: the child's own traceback, earlier in the output, says why
_SUMMARIES = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError",)


def why_failed(output: str, lines: int = 12) -> str:
    """What a failed command's `output` says about why: the end of its first Python traceback that is not a
    launcher's summary of a failed child, up to its exception line (`lines` lines at most); where it has none,
    its last `lines` non-blank lines."""
    text = output.splitlines()
    for start, line in enumerate(text):
        prefix = _PREFIX.match(line).group()
        if line[len(prefix):].strip() != _TRACEBACK:
            continue
        for end in range(start + 1, len(text)):
            body = text[end][len(prefix):] if text[end].startswith(prefix) else None
            if body is not None and body.strip() and not body.startswith((" ", "\t")):
                if not body.startswith(_SUMMARIES):
                    return "\n".join(text[max(start, end + 1 - lines):end + 1])
                break
    return "\n".join([ln for ln in text if ln.strip()][-lines:])
