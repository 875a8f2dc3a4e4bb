#!/usr/bin/env bash
# One device call for the shared-memory carveout rule (issue 12, item 3): build, a smoke test, then the
# sweep of docs/occupancy.md ("The shared-memory carveout"); the table and the log land under $OUT.
# usage (device tool): CCOVERLAP_COMMIT=<sha> bash bench/device/carveout.sh     (about 1-2 minutes on an H200)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
ccoverlap occupancy --validate-carveout --quick 2>&1 | tee "$OUT/carveout.log"
echo "quick rc=${PIPESTATUS[0]}" | tee -a "$OUT/carveout.log"
time ccoverlap occupancy --validate-carveout --out "$OUT/carveout-$(date -u +%F)-h200.json" 2>&1 | tee -a "$OUT/carveout.log"
echo "sweep rc=${PIPESTATUS[0]}" | tee -a "$OUT/carveout.log"
