"""Dispatch order: a collective that fits beside a grid but waited for that grid's later waves to be dispatched
first (equal priority); an SM-wait cause of its own (Cause.DISPATCH_ORDER), found by sm_wait.cause."""
from __future__ import annotations

import math

from ccoverlap.analysis.mechanisms.base import resident
from ccoverlap.analysis.model import KernelEvent
from ccoverlap.model.limits import DeviceLimits


def dispatching(device: DeviceLimits, k: KernelEvent, at: float) -> bool:
    """Was grid `k` still being dispatched at `at`? Its blocks fill more than one wave, and its last wave
    (taken as 1/waves of its time) had not begun."""
    per_sm = resident(device, k.footprint)
    if not per_sm:
        return False
    waves = math.ceil(k.footprint.grid / (per_sm * device.sm_count))
    return waves > 1 and k.ts <= at < k.ts + k.dur * (waves - 1) / waves


