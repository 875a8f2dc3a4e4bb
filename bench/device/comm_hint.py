"""Run a known-answer program with its collective's preferred shared-memory carveout set (issue 27's probe of
graph_dispatch's extra wave): does an SM that takes the collective's CTA first keep the configuration the
collective asks for, so that a compute grid's larger blocks cannot start there until the CTA ends?

  python bench/device/comm_hint.py PERCENT PROGRAM [program's arguments]

PERCENT is the hint set on the stand-in collective's kernel (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT)
before the program launches it; the program is bench/known/PROGRAM.py, run unmodified otherwise.
"""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

KNOWN = Path(__file__).resolve().parents[1] / "known"


def main() -> None:
    percent, program, *rest = sys.argv[1:]
    sys.path.insert(0, str(KNOWN))
    import common  # noqa: PLC0415 (bench/known is on the path only now)

    loaded = common.kernels

    def hinted() -> dict:
        ks = loaded()
        ks[common.COMM_NAME].prefer_carveout(int(percent))
        return ks

    common.kernels = hinted
    sys.argv = [str(KNOWN / f"{program}.py"), *rest]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
