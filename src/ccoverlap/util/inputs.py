"""Opening an input file: only a regular file is read, so a FIFO or a device given where a trace or a policy is
expected is one line, never a wait that lasts until someone kills the command."""
from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from ccoverlap.util.errors import UsageError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    """What a file that is not regular is, for the one line that refuses it."""
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike, what: str) -> BinaryIO:
    """`path` opened for reading in binary, or a UsageError "<kind>, not <what>": stat first (a FIFO or a device
    is never opened), then opened without blocking and checked again (replaced between the two). OSError as
    open() raises it (a missing or unreadable file)."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise UsageError(f"{_kind(mode)}, not {what}")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    f = open(fd, "rb")  # noqa: SIM115 - the caller closes it
    if not stat.S_ISREG(mode := os.fstat(fd).st_mode):
        f.close()
        raise UsageError(f"{_kind(mode)}, not {what}")
    os.set_blocking(fd, True)
    return f



@contextmanager
def extracted(path: str | os.PathLike) -> Iterator[Path]:
    """A folder as it is, or an archive of one (a recorded capture's .tgz) extracted to a temporary folder for the
    time of the with-block: the summarizers read recorded captures either way. Members that would land outside
    the folder (absolute paths, '..', devices) are refused by tarfile's data filter."""
    path = Path(path)
    if path.is_dir():
        yield path
        return
    import tarfile  # on use: the readers that import this module read plain files

    with tempfile.TemporaryDirectory() as tmp, tarfile.open(path) as tar:
        tar.extractall(tmp, filter="data")
        yield Path(tmp)
