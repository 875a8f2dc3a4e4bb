"""The order in which a bench run starts its process sets, and the progress line it prints while they run.

Every strategy runs in `--repeats` fresh process sets, interleaved (A B C A B C ...): a drift of the machine
(clocks warming, another tenant arriving) then falls on every strategy alike instead of on the last ones.
The progress line names what runs now: the process set (its strategy and repeat), the workload its rank 0
began last, the time so far and the time the whole run is estimated to take (from the sets finished so
far). It is one line on stderr per workload started, so it reads the same in a terminal, a log or a pipe.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ccoverlap.control.levers import Strategy

POLL_S = 0.2  # how often the launcher looks at which workload rank 0 runs


@dataclass(frozen=True)
class ProcessSet:
    """One start of fresh ranks: every selected workload under one strategy."""

    label: str  # the rows' name for the strategy (default#2 for a default named a second time)
    strategy: Strategy
    repeat: int  # 1..repeats
    index: int  # 1..total, in the order run


def interleaved(strategies: list[tuple[str, Strategy]], repeats: int) -> list[ProcessSet]:
    """Every strategy once, in the order given, `repeats` times over."""
    order = [(label, s, r) for r in range(1, repeats + 1) for label, s in strategies]
    return [ProcessSet(label, s, r, i) for i, (label, s, r) in enumerate(order, 1)]


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


class Progress:
    """What runs now, how long it has been and how long the run is estimated to take."""

    def __init__(self, total: int, repeats: int, out: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        self.total, self.repeats = total, repeats
        self.out = out or sys.stderr
        self.clock = clock
        self.started = clock()
        self.done = 0  # process sets finished
        self.done_s = 0.0  # the time when the last of them finished, from the start
        self.current: ProcessSet | None = None

    def estimate(self) -> float | None:
        """Seconds the whole run will take, from the process sets finished so far (None before the first)."""
        return self.done_s / self.done * self.total if self.done else None

    def line(self, workload: str) -> str:
        ps = self.current
        elapsed = self.clock() - self.started
        total = self.estimate()
        return (f"[{_clock(elapsed)} of {'~' + _clock(total) if total is not None else 'estimating'}] "
                f"set {ps.index}/{self.total}: {ps.label} repeat {ps.repeat}/{self.repeats}: {workload}")

    def begin(self, ps: ProcessSet) -> None:
        self.current = ps
        self.say("starting ranks")

    def workload(self, name: str) -> None:
        self.say(name)

    def end(self) -> None:
        self.done += 1
        self.done_s = self.clock() - self.started

    def say(self, what: str) -> None:
        try:
            print(self.line(what), file=self.out, flush=True)
        except (BrokenPipeError, ValueError):  # stderr closed: the run goes on without its progress line
            pass


@contextlib.contextmanager
def watch(path: Path, on_change: Callable[[str], None]) -> Iterator[None]:
    """Call `on_change(text)` each time the file at `path` (written whole by rank 0: the workload it began)
    holds something new, from a thread, until the block ends; the file is removed then."""
    stop = threading.Event()

    def poll() -> None:
        seen = None
        while not stop.wait(POLL_S):
            try:
                text = path.read_text()
            except OSError:
                continue
            if text != seen:
                seen = text
                on_change(text)

    thread = threading.Thread(target=poll, name="ccoverlap-bench-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        path.unlink(missing_ok=True)
