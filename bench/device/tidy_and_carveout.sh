#!/usr/bin/env bash
# One device call after the tidy (issue 11) and for the carveout rule (issue 12, item 3): build, every GPU test,
# the interposer's GPU check, then the carveout sweep. Everything lands under $OUT.
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<full sha of HEAD here> bash bench/device/tidy_and_carveout.sh   (the device has no current .git)
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
python3 -m pytest -q -m gpu -v -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest-gpu.log" | tail -25
ccoverlap occupancy --validate-carveout --quick 2>&1 | tail -5 | tee "$OUT/carveout.log"
time ccoverlap occupancy --validate-carveout --out "$OUT/carveout-$(date -u +%F)-h200.json" 2>&1 | tail -40 | tee -a "$OUT/carveout.log"
echo "sweep rc=${PIPESTATUS[0]}" | tee -a "$OUT/carveout.log"
