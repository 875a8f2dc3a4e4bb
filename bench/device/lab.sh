#!/usr/bin/env bash
# The single-GPU lab in one device call: build, run `ccoverlap lab`, keep JSON and PNGs under $OUT.
# usage (device tool): CCOVERLAP_COMMIT=<sha> LAB_ARGS="--reps 20" bash bench/device/lab.sh  (LAB_ARGS unset: --quick)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
time ccoverlap lab ${LAB_ARGS---quick} --out "$OUT/lab-h200.json" 2>&1 | tee "$OUT/lab.log"
python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_lab_gpu.py 2>&1 | tee "$OUT/pytest-lab-gpu.log" | tail -5
