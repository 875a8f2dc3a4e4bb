"""The first passes of `analyze` in worker processes: one a core, each reading and analysing one file at a time.

A worker returns a compact Part (no trace model), so memory grows with the
workers, not with the files; the parts come back in the files' order. The pool
is this module's own (a pipe per worker), so that a worker that dies (killed by
a signal, as an OOM killer or a scheduler does) is known by the task it held,
and Ctrl-C in the parent stops every worker before it returns. `Forked` runs one function beside the caller, in
a process forked from it (a worker's second core, for one large file).
"""
from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable, Generator, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

from ccoverlap.util.lifetime import die_with

T = TypeVar("T")
R = TypeVar("R")


class WorkerDied(Exception):
    """A worker process ended while it held `task`: `why` says how (the signal, or the exit code)."""

    def __init__(self, task: Any, why: str):
        super().__init__(why)
        self.task, self.why = task, why


def _serve(fn: Callable, conn: Connection) -> None:
    """A worker: tasks in, (ok, result or exception) out, until the parent sends None, closes the pipe or is gone
    (a forked worker holds copies of the pipes' ends, so it looks for its parent too). A parent killed outright
    (SIGTERM, SIGKILL: no finally runs) takes it along, mid-task too: else two workers, each blocked sending its
    result into a pipe whose other end the other holds, would wait forever."""
    parent = os.getppid()
    die_with(parent)  # Ctrl-C is the parent's to handle: it stops the workers
    while True:
        try:
            if not conn.poll(1.0):
                if os.getppid() != parent:
                    return
                continue
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        try:
            conn.send((True, fn(task)))
        except Exception as exc:  # raised again in the parent, as a pool does
            conn.send((False, exc))


def _why(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def run(fn: Callable[[T], R], tasks: list[T], jobs: int, progress: Callable[[R], None] | None = None) -> list[R]:
    """fn over tasks in `jobs` processes (forked: the parent's imports come along), results in the tasks' order;
    `progress` is called in this process as each one ends. A worker that dies raises WorkerDied naming its
    task; on any exit every worker is stopped."""
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    results: list = [None] * len(tasks)
    todo = iter(range(len(tasks)))
    workers: dict[Connection, tuple[Any, int | None]] = {}  # parent's end -> (process, task index it holds)
    try:
        for _ in range(max(min(jobs, len(tasks)), 1)):
            mine, theirs = context.Pipe()
            proc = context.Process(target=_serve, args=(fn, theirs), daemon=True)
            proc.start()
            theirs.close()
            workers[mine] = (proc, None)
        for conn in list(workers):
            _give(conn, workers, todo, tasks)
        while any(i is not None for _, i in workers.values()):
            busy = {conn: proc for conn, (proc, i) in workers.items() if i is not None}
            ready = wait(list(busy) + [p.sentinel for p in busy.values()])
            for conn, proc in busy.items():
                if conn not in ready and proc.sentinel not in ready:
                    continue
                index = workers[conn][1]
                try:
                    ok, result = conn.recv()
                except (EOFError, OSError):
                    proc.join()
                    raise WorkerDied(tasks[index], _why(proc.exitcode)) from None
                if not ok:
                    raise result
                results[index] = result
                if progress:
                    progress(result)
                _give(conn, workers, todo, tasks)
    finally:
        _stop(workers)
    return results


def _give(conn: Connection, workers: dict, todo, tasks: list) -> None:
    """The next task to the worker at `conn`, or none left."""
    index = next(todo, None)
    workers[conn] = (workers[conn][0], index)
    if index is not None:
        conn.send(tasks[index])


def _stop(workers: dict) -> None:
    """Every worker ended: idle ones told to, the rest (an error, Ctrl-C) terminated, then killed."""
    for conn, (proc, index) in workers.items():
        if index is None and proc.is_alive():
            try:
                conn.send(None)
            except OSError:
                pass
        conn.close()
    for proc, index in workers.values():
        if index is not None and proc.is_alive():
            proc.terminate()
    for proc, _ in workers.values():
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join()


#: The pipe of a forked process's answers: where the kernel allows (/proc/sys/fs/pipe-max-size, 1 MiB by default),
#: large enough for a first answer the caller reads only later (analysis._Ahead's steps: 0.4 MB at 157 MB of trace),
#: so that the child goes on computing the next meanwhile.
PIPE_BYTES = 1 << 20


class Forked:
    """`fn()` run in a process forked from this one (its memory shared, not copied) while this one goes on; the
    result comes back pickled through a pipe. Where fn is a generator, each item it yields is sent as it is made,
    and result() returns them in turn: the caller reads the first while the child computes the next. The child
    ignores Ctrl-C (util/lifetime: this process ends it) and leaves by os._exit: nothing of the parent's (buffers,
    atexit handlers) runs twice. Works inside a pool's worker, where multiprocessing refuses a daemon process
    children."""

    def __init__(self, fn: Callable[[], Any]):
        read, write = os.pipe()
        with contextlib.suppress(OSError, AttributeError):  # Linux's: an answer the caller reads later does not
            fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, PIPE_BYTES)  # stop the child at a full pipe (64 kB by default)
        parent = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:
            code = 1
            try:
                die_with(parent)  # a parent killed mid-analysis leaves no child computing for nobody
                os.close(read)
                with os.fdopen(write, "wb") as fh:
                    for answer in _answers(fn):  # one that does not pickle ends them: result() then says None
                        fh.write(pickle.dumps(answer, pickle.HIGHEST_PROTOCOL))  # whole, before the pipe blocks
                        fh.flush()
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        self.pipe = os.fdopen(read, "rb")

    def result(self) -> Any:
        """What fn returned, or the next item it yielded (its exception raised here), or None where the child sent
        nothing whole (killed, out of memory, an answer that would not pickle, nothing more yielded): the caller
        does the work itself. A child that answered is left to exit (10 ms and more: its copy of a large parent's
        memory is unmapped) while this one goes on; the caller's cancel() reaps it, by then without waiting."""
        try:
            ok, answer = pickle.load(self.pipe)
        except Exception:
            self.cancel()
            return None
        if not ok:
            raise answer
        return answer

    def cancel(self) -> None:
        """The child ended (killed where it still runs) and reaped; nothing where that was done."""
        if self.pid:
            self.pipe.close()
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = 0


def _answers(fn: Callable[[], Any]) -> Iterator[tuple[bool, Any]]:
    """(True, what fn returned), or one for each item it yields; (False, its exception) last where it raises (raised
    again by Forked.result)."""
    try:
        answer = fn()
        if not isinstance(answer, Generator):
            yield True, answer
            return
        for item in answer:
            yield True, item
    except Exception as exc:
        yield False, exc
