"""Hold the GPU before each profiled step, so the step's launches queue ahead of it as they do unprofiled.

Under the profiler the host launches more slowly. A program whose host runs ahead of the GPU unprofiled (its
launches queued, kernels of several streams ready together) may then reach the GPU one launch at a time: the
kernels that contend for SMs unprofiled never meet, and the capture hides what a lever would gain (measured:
a radix sort and a collective that priority sped up by 15%; docs/doctor.md, "Holding the GPU").

As each profiled step's optimizer step ends (and as the profiler's warm-up step's ends, for the first), the
capture arms the launch interposer (ccoverlap_arm_hold): the next kernel launch of the process first makes the
program's current stream wait on a 32-bit word of pinned host memory (cuStreamWaitValue32: no kernel, nothing in
the trace). The capture sets the word as that next step's optimizer step ends: the GPU then runs the step with
every launch of it already queued. Placed at the first launch, not at once, so a copy the host waits for between
the steps (a `loss.item()` after the optimizer step) is not held; that launch's own stream waits too (FSDP2
launches a step's first kernel on a stream synchronized with the current one before the wait). Work on another
stream that does not wait for a held one (directly or through an event) is not held. Where the host waits for the
GPU inside the step (an `.item()`, a synchronize, an allocation that frees cached memory), a timer disarms the hold
and sets the word after at most `timeout_s`: the step then ran with its launches queued up to that point, and the
record counts it.

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


def timeout_for(longest_ms: float) -> float:
    """How long a hold may last: TIMEOUT_STEPS times the longest host step so far (ms), within the bounds."""
    return min(TIMEOUT_MAX_S, max(TIMEOUT_MIN_S, TIMEOUT_STEPS * 1e-3 * longest_ms))


class Word(Protocol):
    """The flag a held stream waits on."""

    def arm(self, stream: int, value: int) -> None:
        """From the next kernel launch on, `stream`'s work waits until the word is at least `value`."""

    def set(self, value: int) -> None:
        """Disarm a hold not yet placed, and write `value` to the word."""


@dataclass
class InterposerWord:
    """The word in pinned host memory, the wait placed by the launch interposer at the next launch."""

    host: int
    device: int

    @classmethod
    def create(cls) -> InterposerWord:
        """OSError (saying why) where the interposer is not preloaded or the driver gives no pinned memory."""
        from ccoverlap.control import interposer  # on use: only a doctor's capture holds
        from ccoverlap.gpu import cuda_driver

        if not interposer.arm_hold(0, 0, 0):
            raise OSError("the launch interposer is not loaded in this process (it must be preloaded)")
        drv = cuda_driver.driver()
        if drv is None:
            raise OSError("no CUDA driver")
        try:
            host, device = drv.host_alloc(4)
        except cuda_driver.CudaError as exc:
            raise OSError(str(exc)) from None
        return cls(host, device)

    def arm(self, stream: int, value: int) -> None:
        from ccoverlap.control import interposer

        interposer.arm_hold(stream, self.device, value)

    def set(self, value: int) -> None:
        from ccoverlap.control import interposer

        interposer.arm_hold(0, 0, 0)
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
        """Hold `stream` from the next launch until release() or `timeout_s`."""
        with self._lock:
            value = self._placed + 1
            self.word.arm(stream, value)
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
