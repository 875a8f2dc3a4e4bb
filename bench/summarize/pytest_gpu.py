"""The GPU suite's record from its device log (bench/device/gpu_tests.sh): the counts pytest printed, every skip
with its reason, every failure, the durations, and the provenance the log carries (the GPU and driver line of
prologue.sh, the versions line gpu_tests.sh prints), so no figure of it is copied by hand.

  python bench/summarize/pytest_gpu.py LOG --commit SHA --out bench/results/pytest-gpu-h200-DATE.json
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from ccoverlap.util.output import write_json

SUMMARY = re.compile(r"^=*\s*(?P<body>(?:\d+ \w+(?:, )?)+) in (?P<s>[\d.]+)s")
COUNT = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)")
DURATION = re.compile(r"^(?P<s>[\d.]+)s (?P<when>call|setup|teardown)\s+(?P<test>\S+)")


def parse(text: str) -> dict:
    """The counts of the last summary line, skips and failures with their reasons, per-test call durations."""
    lines = text.splitlines()
    summary = next((m for line in reversed(lines) if (m := SUMMARY.match(line.strip()))), None)
    if summary is None:
        raise SystemExit("no pytest summary line in the log: the run did not finish")
    counts = {("errors" if k.startswith("error") else k): int(n) for n, k in COUNT.findall(summary["body"])}
    gpu = next((line for line in lines if line.startswith("NVIDIA ")), None)
    versions = next((json.loads(line.split(" ", 1)[1]) for line in lines if line.startswith("versions ")), {})
    return {
        "counts": counts, "pytest_wall_s": float(summary["s"]),
        "skipped": [line.removeprefix("SKIPPED ") for line in lines if line.startswith("SKIPPED ")],
        "failures": [line.removeprefix("FAILED ") for line in lines if line.startswith(("FAILED ", "ERROR "))],
        "durations_s": {m["test"]: float(m["s"]) for line in lines
                        if (m := DURATION.match(line.strip())) and m["when"] == "call"},
        "gpu_driver": gpu, **versions,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", type=Path)
    ap.add_argument("--commit", required=True, help="the commit the device ran (CCOVERLAP_COMMIT)")
    ap.add_argument("--command", default="CCOVERLAP_COMMIT=<commit> bash bench/device/gpu_tests.sh")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    got = parse(args.log.read_text())
    doc = {"what": "every GPU test of the suite (pytest -m gpu) on one device call",
           "provenance": {"gpu_driver": got.pop("gpu_driver"), "torch": got.pop("torch", None),
                          "cuda": got.pop("cuda", None), "nccl": got.pop("nccl", None), "commit": args.commit,
                          "command": args.command, "log": args.log.name},
           **got, "passed": got["counts"].get("passed", 0), "failed": got["counts"].get("failed", 0)}
    write_json(str(args.out), doc)
    print(f"{doc['passed']} passed, {doc['failed']} failed: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
