#!/usr/bin/env bash
# One device call for the levers issue (12): the lab's lever cases, the cuBLAS GEMM's footprint, the GPU tests.
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<full sha of HEAD here> bash bench/device/levers.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; mkdir -p "$OUT/cases"
if ls .whl/*.whl >/dev/null 2>&1; then  # ijson (the trace parser) is not in the device image
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
pairs=()
for case in carveout green-cluster persistent-gemm; do
  timeout 150 ccoverlap lab --case "$case" --out "$OUT/cases/lab-$case.json" --no-plots 2>&1 | tail -30 | tee -a "$OUT/levers.log"
  pairs+=("$case=$OUT/cases/lab-$case.json")
done
python3 bench/summarize_levers.py "$OUT/levers-$(date -u +%F)-h200.json" "${pairs[@]}" | tee -a "$OUT/levers.log"
python3 bench/device/gemm_footprint.py "$OUT/gemm-footprint.json" > /dev/null 2>>"$OUT/levers.log"; echo "gemm footprint rc=$?"
python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest-gpu.log" | tail -8
