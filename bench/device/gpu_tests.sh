#!/usr/bin/env bash
# Every GPU test of the suite on one device call (the record of a commit's GPU tests).
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<sha> bash bench/device/gpu_tests.sh
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
timeout 480 python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests 2>&1 | tee "$OUT/pytest-gpu.log" | tail -15
