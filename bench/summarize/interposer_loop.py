"""Issue 29.4's loop on the device machine's cores folded into one record: the chain records that
bench/device/interposer_loop.sh brought back (each a bench/ci/interposer_loop.py record: pytest sessions of the
interposer's test modules, one after another, until its minutes ran out or a session failed), run at once.

  python bench/summarize/interposer_loop.py CHAIN.json [CHAIN.json ...] --gpu-host TEXT --out RESULTS.json

Counts every module run that passed in all chains, and says whether any session failed (then its chain's output
tail is in the record). "In a row" here is per chain: each chain ran its sessions one after another; the chains
ran side by side, the first with two spinning processes beside them.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ccoverlap.util.output import write_json


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("chains", nargs="+", type=Path)
    p.add_argument("--gpu-host", required=True, help="the machine the chains ran on, in words")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    chains = [json.loads(c.read_text()) for c in args.chains]
    sessions = [s for c in chains for s in c["sessions"]]
    doc = {"what": f"{len(chains)} chains of bench/ci/interposer_loop.py side by side on {args.gpu_host}: "
                   + chains[0]["what"],
           "provenance": chains[0]["provenance"] | {"machine": args.gpu_host, "chains": len(chains)},
           "module_runs_passed": sum(c["module_runs_passed_in_a_row"] for c in chains),
           "failed": any(c["failed"] for c in chains), "sessions": len(sessions),
           "session_wall_s": sorted(s["wall_s"] for s in sessions),
           "chains": chains}
    write_json(args.out, doc)
    print(f"{doc['module_runs_passed']} module runs passed in {len(chains)} chains "
          f"({'a session FAILED' if doc['failed'] else 'no session failed'}); {args.out}")
    return 1 if doc["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
