"""The simulator's parameters, fitted once per GPU on recorded lab runs, and written with their provenance.

Two fits, each on what it explains and nothing else:
* the communication bandwidth law (`transforms.CommLaw`) on the proxy's times alone at several CTA and thread
  counts (bench/device/whatif_record.py's sweep): least squares on the log of time over the 16 x 640 time;
* the L1 a collective's CTA needs for its full rate (`duration.Pace.l1_need`) on the same sweep, where one CTA count
  was run at thread counts whose own shared-memory configurations leave each CTA different L1 (`fit_l1_need`);
* the pace model (`duration.Pace`: SM-issue share and saturation, memory-system share) on the lab's overlapped cells
  (every family x strategy of a `ccoverlap lab --quick` record): the least mean absolute relative error of the
  predicted total and communication completion over a fixed grid.
The error the fit leaves (median and 90th percentile over the cells) is what `predict` gives as the interval.
Nothing is fitted per program: a capture is predicted with its GPU's file (`load`), or the H200's, said so.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits
from ccoverlap.whatif.duration import Pace, l1_left
from ccoverlap.whatif.residency import alone_per_sm, config_for
from ccoverlap.whatif.transforms import CommLaw

SM_SHARES = (0.5, 0.75, 1.0)
MEMORY_SHARES = (0.1, 0.2, 0.3, 0.4)
SATURATIONS_OF_ISSUE = (0.25, 0.5, 0.75, 1.0)
SATURATIONS = tuple(range(1, 65))
EXPONENTS = tuple(i / 20 for i in range(31))


@dataclass(frozen=True)
class Calibration:
    pace: Pace
    law: CommLaw
    error_median: float  # relative error of the fit's cells (|predicted - measured| / measured)
    error_p90: float
    gpu: str = "NVIDIA H200"
    provenance: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Calibration:
        return cls(Pace(**d["pace"]), CommLaw(**d["law"]), d["error_median"], d["error_p90"], d["gpu"],
                   d.get("provenance", {}))


def fit_law(sweep: Sequence[dict]) -> CommLaw:
    """The law whose time ratios best match the sweep's (rows: ctas, threads, alone_ms)."""
    ref = next(r for r in sweep if r["ctas"] == 16 and r["threads"] == 640)

    def loss(law: CommLaw) -> float:
        return sum(math.log(r["alone_ms"] / ref["alone_ms"] / law.time_ratio((16, 640), (r["ctas"], r["threads"]))) ** 2
                   for r in sweep)

    return min((CommLaw(s, e) for s in SATURATIONS for e in EXPONENTS), key=loss)


def fit_l1_need(sweep: Sequence[dict], device: DeviceLimits) -> float | None:
    """The L1 (B) a collective's CTA needs for its full rate, read off its sweep: at each CTA count run with shapes
    whose own configurations leave each CTA different L1 (`Pace.alone_l1`: e.g. 640 threads at one CTA per SM, 288
    threads at two, 124 and 28 KB on an H200), the shape with less L1 taken as bound by it, its rate in proportion
    to its L1: need = its L1 x its time / the other's time; the median over the CTA counts. None where no CTA count
    was run with two L1 sizes, or the device's L1 is not known."""
    def l1(r: dict) -> float | None:
        fp = KernelFootprint(r["threads"], r["regs"], r["static_smem"], r["dynamic_smem"], r["ctas"], 1, "sweep")
        left = l1_left(device, config_for(device, fp, None))
        per_sm = min(alone_per_sm(device, fp, None), -(-r["ctas"] // device.sm_count))
        return None if left is None else left / max(per_sm, 1)

    needs = []
    for ctas in sorted({r["ctas"] for r in sweep}):
        rows = [(l1(r), r["alone_ms"]) for r in sweep if r["ctas"] == ctas]
        rows = sorted((x, t) for x, t in rows if x is not None)
        if len(rows) >= 2 and rows[0][0] < rows[-1][0] and rows[0][1] > rows[-1][1]:
            (low, t_low), (_, t_high) = rows[0], rows[-1]
            needs.append(low * t_low / t_high)
    return quantile(needs, 0.5) if needs else None


def errors(pairs: Sequence[tuple[float, float]]) -> list[float]:
    """|predicted - measured| / measured of each (predicted, measured) pair."""
    return [abs(p - m) / m for p, m in pairs if m > 0]


def quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def fit_pace(evaluate: Callable[[Pace], list[tuple[float, float]]], l1_need: float | None = None
             ) -> tuple[Pace, list[float]]:
    """The grid point of SM_SHARES x MEMORY_SHARES x SATURATIONS_OF_ISSUE with the least mean error, with `l1_need`
    (`fit_l1_need`, fitted before on the sweep) as it is; `evaluate(pace)` gives the (predicted, measured) pairs of
    every fitted cell. Returns the best pace and its cells' errors."""
    def loss(p: Pace) -> float:
        e = errors(evaluate(p))
        return sum(e) / len(e)

    best = min((Pace(sm, mem, sat, l1_need=l1_need)
                for sm in SM_SHARES for mem in MEMORY_SHARES for sat in SATURATIONS_OF_ISSUE), key=loss)
    return best, errors(evaluate(best))


def path_for(gpu: str) -> Path:
    slug = gpu.lower().replace("nvidia", "").strip().replace(" ", "-")
    return Path(str(resources.files("ccoverlap.whatif").joinpath("calibration", f"{slug}.json")))


def load(gpu: str | None) -> tuple[Calibration, str | None]:
    """The calibration of `gpu` (a device name), else the H200's with a note saying so; else defaults, said."""
    for name in ([gpu] if gpu else []) + ["NVIDIA H200"]:
        p = path_for(name)
        if p.exists():
            cal = Calibration.from_dict(json.loads(p.read_text()))
            note = None if name == gpu else f"no calibration for {gpu or 'this GPU'}: the H200's parameters are used"
            return cal, note
    return Calibration(Pace(), CommLaw(), math.nan, math.nan), "uncalibrated: the model's default parameters"
