"""Hold the GPU before each profiled step, so the step's launches queue ahead of it as they do unprofiled.

Under the profiler the host launches more slowly. A program whose host runs ahead of the GPU unprofiled (its
launches queued, kernels of several streams ready together) may then reach the GPU one launch at a time: the
kernels that contend for SMs unprofiled never meet, and the capture hides what a lever would gain (measured:
a radix sort and a collective that priority sped up by 15%; docs/doctor.md, "Holding the GPU").

Before each recorded step the capture makes the program's current stream wait on a word of pinned host memory
(cuStreamWaitValue32: no kernel, nothing in the trace) and sets the word when that step's optimizer step has
ended: the GPU then runs the step with every launch of it already queued. Work on a stream that does not wait
for the held one (directly or through an event) is not held. Where the host waits for the GPU inside the step (an
`.item()`, a synchronize, an allocation that frees cached memory), a timer sets the word after at most
`timeout_s`: the step then ran with its launches queued up to that point, and the record counts it.

Each hold is a number one higher than the last; the word only grows (a wait is for "at least"), so a late
timer never re-arms a later hold. Re-entrant: the timer threads and the program's thread share one lock.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Protocol

#: a hold's timer: this many times the longest host step seen (the profiler slows the host's launches, and
#: unprofiled a GPU-bound host's step is the GPU's), within the bounds (seconds)
TIMEOUT_STEPS = 4
TIMEOUT_MIN_S = 0.02
TIMEOUT_MAX_S = 2.0


def timeout_for(host_ms: list[float]) -> float:
    """How long a hold may last: TIMEOUT_STEPS times the longest host step so far, within the bounds."""
    return min(TIMEOUT_MAX_S, max(TIMEOUT_MIN_S, TIMEOUT_STEPS * 1e-3 * max(host_ms, default=0.0)))


class Word(Protocol):
    """The flag a held stream waits on."""

    def wait(self, stream: int, value: int) -> None:
        """`stream`'s later work waits until the word is at least `value`."""

    def set(self, value: int) -> None:
        """Write `value` to the word."""


@dataclass
class DriverWord:
    """The word in pinned host memory, waited on through the CUDA driver."""

    drv: object  # ccoverlap.gpu.cuda_driver.Driver
    host: int
    device: int

    @classmethod
    def create(cls) -> DriverWord:
        """OSError (naming the call) where the driver or its stream memory operations are missing."""
        from ccoverlap.gpu import cuda_driver  # on use: only a doctor's capture holds

        drv = cuda_driver.driver()
        if drv is None:
            raise OSError("no CUDA driver")
        try:
            host, device = drv.host_alloc(4)
        except (cuda_driver.CudaError, AttributeError) as exc:
            raise OSError(str(exc)) from None
        return cls(drv, host, device)

    def wait(self, stream: int, value: int) -> None:
        from ccoverlap.gpu import cuda_driver

        try:
            self.drv.wait_value(stream, self.device, value)
        except (cuda_driver.CudaError, AttributeError) as exc:
            raise OSError(str(exc)) from None

    def set(self, value: int) -> None:
        ctypes.c_uint32.from_address(self.host).value = value


class Hold:
    """Holds placed and released; `summary()` is what the record keeps."""

    def __init__(self, word: Word):
        self.word = word
        self._lock = threading.Lock()
        self._placed = 0  # the number of the last hold placed
        self._released = 0  # the word's value
        self._timer: threading.Timer | None = None
        self.timeout_s = TIMEOUT_MIN_S  # of the last hold placed
        self.timed_out = 0  # holds released by their timer (the host waited for the GPU inside the step)

    @property
    def held(self) -> bool:
        return self._released < self._placed

    def place(self, stream: int, timeout_s: float) -> None:
        """Hold `stream` until release() or `timeout_s`; OSError where the driver refuses (nothing held)."""
        with self._lock:
            value = self._placed + 1
            self.word.wait(stream, value)
            self._placed, self.timeout_s = value, timeout_s
        timer = threading.Timer(timeout_s, self._expire, (value,))
        timer.daemon = True
        self._timer = timer
        timer.start()

    def release(self) -> None:
        """Let the GPU run what is queued behind the last hold (nothing where none is held)."""
        with self._lock:
            self._set(self._placed)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, value: int) -> None:
        with self._lock:
            if self._released < value:
                self.timed_out += 1
                self._set(value)

    def _set(self, value: int) -> None:
        if value > self._released:
            self.word.set(value)
            self._released = value

    def summary(self) -> dict:
        return {"held": self._placed, "timed_out": self.timed_out, "timeout_ms": round(self.timeout_s * 1e3, 3)}
