"""What holding a launch again changes (whatif/anchor.py, `hold`; docs/whatif.md, "Pace"): on every recorded capture
the validation judges (whatif_validation.py's ten known-answer programs and its held-out sets), each launch of the
first typical step whose floor the rounds after the first raised, with its time alone, its measured span and its
simulated span held once and at the last round.

  python bench/summarize/hold_rounds.py --out bench/results/hold-rounds-2026-12-07.json

Nothing is fitted: the shipped H200 calibration, as `ccoverlap whatif` runs it.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import whatif_validation as wv  # noqa: E402

from ccoverlap.doctor import record  # noqa: E402
from ccoverlap.gpu.provenance import source_commit  # noqa: E402
from ccoverlap.util.inputs import extracted  # noqa: E402
from ccoverlap.util.output import write_json  # noqa: E402
from ccoverlap.whatif import anchor, calibration, session  # noqa: E402
from ccoverlap.whatif.dispatch import simulate  # noqa: E402


def raised(folder: Path) -> list[dict]:
    """The launches of the capture's first typical step whose floor a round after the first raised."""
    processes, _ = record.folder_processes(folder)
    cap = session.capture(folder, processes=processes)
    cal, _ = calibration.load(cap.step.device.name)
    step, gpcs = cap.step, session.gpcs(cap.step)
    (first,), _ = anchor.hold([step], [simulate(step, cal.pace, gpcs)])
    last = session.hold(dataclasses.replace(cap, steps=(step,)), cal)[0].step
    ran_once, ran_last = simulate(first, cal.pace, gpcs), simulate(last, cal.pace, gpcs)
    out = []
    for n, (a, b) in enumerate(zip(first.kernels, last.kernels)):
        if a.held is not None and b.held is not None and b.held > a.held:
            out.append({"launch": n, "name": a.name, "grid": a.footprint.grid, "alone_us": a.alone_us,
                        "measured_us": a.measured_end_us - a.measured_start_us,
                        "held_once": a.held, "held_last": b.held,
                        "simulated_held_once_us": ran_once.kernels[n].end_us - ran_once.kernels[n].start_us,
                        "simulated_held_last_us": ran_last.kernels[n].end_us - ran_last.kernels[n].start_us})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sets = {"known-answers": ((wv.CAPTURES.name,), wv.PROGRAMS)} | {
        f"held-out {name}": (archives, programs) for name, (archives, programs, _) in wv.HELD_OUT.items()}
    captures = []
    for name, (archives, programs) in sets.items():
        with contextlib.ExitStack() as stack:
            roots = [stack.enter_context(extracted(wv.RESULTS / a)) for a in archives]
            for program in programs:
                folder = next(f for root in roots if (f := root / f"doctor-{program}").is_dir())
                captures.append({"set": name, "program": program, "archives": list(archives),
                                 "raised": raised(folder)})
                print(program, len(captures[-1]["raised"]), file=sys.stderr, flush=True)
    write_json(args.out, {
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "provenance": {"command": " ".join(["python", *sys.argv]), "commit": source_commit(),
                       "machine": f"CPU ({platform.machine()}, {os.cpu_count()} cores), no GPU",
                       "hold_rounds": anchor.HOLD_ROUNDS,
                       "captured": "the archives named per capture (their provenance: the known-answer record "
                                   "beside each, whatif_validation.recorded_with)"},
        "captures_with_a_floor_raised": sum(bool(c["raised"]) for c in captures), "captures": captures})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
