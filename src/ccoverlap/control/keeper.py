"""The keeper: the one process between ccoverlap and a command it starts, so that nothing the command starts
outlives ccoverlap, however ccoverlap ends (procs.Child starts it: `python -I -S keeper.py CONTROL STATUS SIGNALS`).

It is a child subreaper (PR_SET_CHILD_SUBREAPER): whatever the command starts and leaves behind is reparented
to it, not to init, even a process in a session of its own (torchrun's workers are). It starts the command in a
process group of its own, and the command dies with it (PR_SET_PDEATHSIG). Then:
- a signal the keeper gets among those FORWARDED (procs.FORWARDED, handed over in argv) goes on to the
  command's group;
- when the command ends, whatever it left running gets SIGTERM, `grace_s`, then SIGKILL;
- when the CONTROL pipe closes, because ccoverlap closed it or died (of SIGKILL too: the kernel closes it),
  every process below the keeper is killed at once;
and it writes how the command ended to the STATUS pipe ("exit N", "signal N", "error TEXT": it could not be
started, which the command's stderr says too) and exits.

Standard library only, and started isolated (-I -S): it must not read the command's environment (the
interposer preloaded, the start-up hook on PYTHONPATH), which it is handed on CONTROL as one JSON line.
"""
import ctypes
import json
import os
import select
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
POLL_S = 1.0  # without a pidfd (Linux < 5.3): how often the command's end is looked for
KILLED_S = 10.0  # how long a SIGKILLed process may take to go (one in the GPU driver can); then it is left to init
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
#: the signals passed on to the command's process group (argv)
FORWARDED: tuple[int, ...] = ()
#: the command's pid (and process group), once started
command: int | None = None
#: pid -> wait status of the children reaped so far (the command's is looked up here)
ended: dict[int, int] = {}


def _descendants(root: int) -> list[int]:
    """Every living process below `root` (zombies left out: their parent reaps them, or they come to us)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc (not Linux): the command's process group is all there is to end
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # ended meanwhile
            continue
        state, ppid = stat[stat.rindex(b")") + 2:].split()[:2]
        if state != b"Z":
            children.setdefault(int(ppid), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        below = children.get(todo.pop(), [])
        out += below
        todo += below
    return out


def _reap() -> None:
    """Reap every child that has ended (the orphans that came to us among them)."""
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        ended[pid] = raw


def _end_all(grace_s: float) -> None:
    """SIGTERM (and SIGCONT, for a stopped one) to every process below us, `grace_s` for them to end, then
    SIGKILL until none is left (KILLED_S at most)."""
    me, deadline, told = os.getpid(), time.monotonic() + grace_s, set()
    while (below := _descendants(me)) and time.monotonic() < deadline + KILLED_S:
        late = time.monotonic() >= deadline
        for pid in below:
            if late or pid not in told:
                for sig in (signal.SIGKILL,) if late else (signal.SIGTERM, signal.SIGCONT):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                told.add(pid)
        time.sleep(0.01)
        _reap()


def _start(spec: dict, status: int) -> int:
    """Fork the command: its own process group, death with the keeper, default signal dispositions."""
    keeper = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setpgid(0, 0)
        if _libc is not None:
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != keeper:  # the keeper died before the line above
                os._exit(1)
        for sig in (*FORWARDED, signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores SIGPIPE and SIGXFSZ
            signal.signal(sig, signal.SIG_DFL)
        if spec.get("cwd"):
            os.chdir(spec["cwd"])
        os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
    except BaseException as exc:  # noqa: BLE001 - in the fork: say why, never run on as a second keeper
        why = f"{spec['argv'][0]}: {getattr(exc, 'strerror', None) or exc}"
        os.write(status, f"error {why}\n".encode())
        os.write(2, f"ccoverlap: cannot run {why}\n".encode())  # where the command's own errors would go
    os._exit(127)


def main(control: int, status: int, forwarded: tuple[int, ...]) -> None:
    global FORWARDED, command
    FORWARDED = forwarded
    for sig in FORWARDED:  # from the start: a signal before the command runs must not end the keeper
        signal.signal(sig, _forward)
    if _libc is not None:
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for fd in (control, status):
        os.set_inheritable(fd, False)  # the command gets neither
    with os.fdopen(control, "rb", buffering=0, closefd=False) as f:
        line = b""
        while not line.endswith(b"\n") and (chunk := f.read(65536)):
            line += chunk
    if not line.endswith(b"\n"):  # ccoverlap ended before it said what to run
        return
    spec = json.loads(line)
    child = command = _start(spec, status)
    try:
        ends = [os.pidfd_open(child)]  # readable once the command has ended
    except (AttributeError, OSError):
        ends = []
    waitable = [control, *ends]
    while child not in ended:
        ready, _, _ = select.select(waitable, [], [], None if ends else POLL_S)
        if control in ready and not os.read(control, 4096):  # ccoverlap is gone: nothing stays
            waitable.remove(control)
            _end_all(0.0)
        _reap()
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_IGN)
    _end_all(float(spec.get("grace_s", 5.0)))
    code = os.waitstatus_to_exitcode(ended[child])
    try:
        os.write(status, (f"signal {-code}\n" if code < 0 else f"exit {code}\n").encode())
    except OSError:  # ccoverlap is gone: nobody to tell
        pass


def _forward(signum: int, _frame) -> None:
    if command is None or command in ended:  # not started, or reaped: its group id may be another's now
        return
    try:
        os.killpg(command, signum)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), tuple(int(s) for s in sys.argv[3].split(",")))
