#!/usr/bin/env bash
# One device call for the levers issue (12): the lab's lever cases, the cuBLAS GEMM's footprint, the GPU tests.
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<full sha of HEAD here> bash bench/device/levers.sh
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
mkdir -p "$OUT/cases"
pairs=()
for case in carveout green-cluster persistent-gemm; do
  timeout 150 ccoverlap lab --case "$case" --out "$OUT/cases/lab-$case.json" --no-plots 2>&1 | tail -30 | tee -a "$OUT/levers.log"
  pairs+=("$case=$OUT/cases/lab-$case.json")
done
python3 bench/summarize/levers.py "$OUT/levers-$(date -u +%F)-h200.json" "${pairs[@]}" | tee -a "$OUT/levers.log"
python3 bench/device/gemm_footprint.py "$OUT/gemm-footprint.json" > /dev/null 2>>"$OUT/levers.log"; echo "gemm footprint rc=$?"
python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest-gpu.log" | tail -8
