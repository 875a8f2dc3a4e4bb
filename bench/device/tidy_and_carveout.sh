#!/usr/bin/env bash
# One device call after the tidy (issue 11) and for the carveout rule (issue 12, item 3): build, every GPU test,
# the interposer's GPU check, then the carveout sweep. Everything lands under $OUT.
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<full sha of HEAD here> bash bench/device/tidy_and_carveout.sh   (the device has no current .git)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then  # ijson (the trace parser) is not in the device image
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 -m pytest -q -m gpu -v -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest-gpu.log" | tail -25
ccoverlap occupancy --validate-carveout --quick 2>&1 | tail -5 | tee "$OUT/carveout.log"
time ccoverlap occupancy --validate-carveout --out "$OUT/carveout-$(date -u +%F)-h200.json" 2>&1 | tail -40 | tee -a "$OUT/carveout.log"
echo "sweep rc=${PIPESTATUS[0]}" | tee -a "$OUT/carveout.log"
