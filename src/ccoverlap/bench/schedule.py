"""The order in which a bench run starts its process sets, and what its progress says while they run.

Every strategy runs in `--repeats` fresh process sets, interleaved (A B C A B C ...): a drift of the machine
(clocks warming, another tenant arriving) then falls on every strategy alike instead of on the last ones.
The run's progress (util.output.Progress: a bar on a terminal, a line as a set ends in a log or a pipe, with
the time so far and the estimate of the whole run) counts process sets and names what runs now: the set, its
strategy and repeat, and the workload its rank 0 began last (rank 0 writes its name to a file watched here).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ccoverlap.control.levers import Strategy

POLL_S = 0.2  # how often the launcher looks at which workload rank 0 runs


@dataclass(frozen=True)
class ProcessSet:
    """One start of fresh ranks: every selected workload under one strategy."""

    label: str  # the rows' name for the strategy (default#2 for a default named a second time)
    strategy: Strategy
    repeat: int  # 1..repeats
    index: int  # 1..total, in the order run

    def title(self, total: int, repeats: int) -> str:
        """What the progress calls it: `set 5/12: no-overlap repeat 2/3`."""
        return f"set {self.index}/{total}: {self.label} repeat {self.repeat}/{repeats}"


def interleaved(strategies: list[tuple[str, Strategy]], repeats: int) -> list[ProcessSet]:
    """Every strategy once, in the order given, `repeats` times over."""
    order = [(label, s, r) for r in range(1, repeats + 1) for label, s in strategies]
    return [ProcessSet(label, s, r, i) for i, (label, s, r) in enumerate(order, 1)]


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
