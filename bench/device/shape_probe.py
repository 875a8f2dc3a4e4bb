"""Why does the shape lever slow some held-out programs by 16-19% (heldout_index_add 1.192x, heldout_groupnorm 1.162x,
heldout_embedding_bwd 1.193x, where the what-if predicted 1.00-1.04x)? Each program in fresh processes, interleaved,
under the interposer's variants that take shape apart: preloaded doing nothing (mode off), shape itself (mode auto),
a 16-byte pad gated as auto gates (the launch path and the smem configuration without fewer blocks per SM), and,
where a program names one, auto on its largest kernel only; every run's interposer stats kept. Then a doctor capture
(no alone window) of each program plain and under auto, whose kernels' durations say where the time went.

  python bench/device/shape_probe.py --out DIR [--rounds 2] [--programs a,b]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from known_answers import CCOVERLAP, REPO, STEPS, WARMUP, fresh, log, run  # noqa: E402

#: variant -> interposer environment (None: no preload); {largest} is the program's largest kernel's name pattern
VARIANTS: dict[str, dict[str, str] | None] = {
    "plain": None,
    "off": {"CCOVERLAP_MODE": "off"},
    "auto": {"CCOVERLAP_MODE": "auto"},
    "pad16-gated": {"CCOVERLAP_MODE": "pad", "CCOVERLAP_PAD_BYTES": "16", "CCOVERLAP_GATE": "comm"},
    "auto-largest-only": {"CCOVERLAP_MODE": "auto", "CCOVERLAP_INCLUDE": "{largest}"},
    "auto-but-largest": {"CCOVERLAP_MODE": "auto", "CCOVERLAP_EXCLUDE": "{largest}"},
}
#: program -> its longest kernel's name (a POSIX regex), from its recorded doctor capture
LARGEST = {"heldout_index_add": "indexFuncLargeIndex", "heldout_groupnorm": "elementwise_kernel<128, 4",
           "heldout_embedding_bwd": "compute_grad_weight|sum_and_scatter"}


def interposer() -> str:
    from ccoverlap.control.policy import for_run
    from ccoverlap.control import levers

    return for_run(None, "shape", {}, levers.Host.detect()).environ({})["LD_PRELOAD"]


def once(name: str, variant: str, out: Path, preload: str) -> dict:
    stats = out / f"stats-{name}-{variant}-{time.monotonic_ns()}.json"
    env = dict(os.environ)
    extra = VARIANTS[variant]
    if extra is not None:
        env |= {k: v.format(largest=LARGEST[name]) for k, v in extra.items()}
        env |= {"LD_PRELOAD": preload, "CCOVERLAP_STATS": str(stats)}
    got, code, wall, tail = fresh(name, variant, out, env)
    return {"variant": variant, "env": {k: v for k, v in env.items() if k.startswith("CCOVERLAP_")},
            "code": code, "process_wall_s": wall, "samples_ms": got.get("steps_ms"), "losses": got.get("losses"),
            "loop_wall_s": got.get("wall_s"), "interposer_stats": json.loads(stats.read_text()) if stats.exists()
            else None, "tail": tail if code else None}


def doctor(name: str, variant: str, out: Path, preload: str) -> dict:
    folder = out / f"doctor-{name}-{variant}"
    env = dict(os.environ)
    if VARIANTS[variant] is not None:
        env |= {**VARIANTS[variant], "LD_PRELOAD": preload}
    cmd = [*CCOVERLAP, "doctor", "--alone", "off", "--out", str(folder), "--json", str(folder) + ".json", "--",
           sys.executable, str(REPO / "bench" / "known" / f"{name}.py"), "--steps", "14", "--warmup", "3"]
    code, wall, tail = run(cmd, 240, env)
    return {"variant": variant, "code": code, "wall_s": wall, "folder": folder.name, "tail": tail if code else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--programs", default="heldout_index_add,heldout_groupnorm,heldout_embedding_bwd")
    a = p.parse_args()
    from ccoverlap.gpu import provenance
    from ccoverlap.util.output import write_json

    a.out.mkdir(parents=True, exist_ok=True)
    preload = interposer()
    names = a.programs.split(",")
    result = {"what": __doc__, "provenance": provenance.collect(), "command": " ".join(sys.argv),
              "steps_per_run": STEPS, "warmup": WARMUP, "variants": VARIANTS, "largest": LARGEST, "programs": {}}
    for name in names:
        runs = [once(name, v, a.out, preload) for _ in range(a.rounds) for v in VARIANTS]
        plain = [s for r in runs if r["variant"] == "plain" for s in r["samples_ms"] or []]
        for v in VARIANTS:
            got = [s for r in runs if r["variant"] == v for s in r["samples_ms"] or []]
            if got and plain:
                median = statistics.median(got)
                log(name, v, f"median {median:.3f} ms, {median / statistics.median(plain):.3f}x plain "
                    f"(min {min(got):.3f}, max {max(got):.3f}, n {len(got)})")
        result["programs"][name] = {"runs": runs,
                                    "doctors": [doctor(name, v, a.out, preload) for v in ("plain", "auto")]}
        write_json(a.out / "shape-probe.json", result)
    log("done")


if __name__ == "__main__":
    main()
