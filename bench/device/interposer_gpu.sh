#!/usr/bin/env bash
# One device call for the launch interposer (issue 4): GPU tests, bitwise-identical torch results
# under every policy, the pad seen on the device, and the per-launch overhead of the cached path.
# Writes under $OUT: interposer-h200.json (results with provenance), pytest-gpu.log, run.log.
# usage (device tool): CCOVERLAP_COMMIT=<sha> bash bench/device/interposer_gpu.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  echo "interposer: $(ccoverlap interposer --path)"
} 2>&1 | tee "$OUT/run.log"

timeout 150 python3 -m pytest -m gpu -v -p no:cacheprovider tests/test_interposer*.py 2>&1 \
  | tee "$OUT/pytest-gpu.log" | tail -8

BIN=$(mktemp -d)/launch_bench
nvcc -O2 -arch=native -o "$BIN" bench/device/launch_bench.cu 2>&1 | tee -a "$OUT/run.log"
timeout 200 python3 bench/device/interposer_gpu.py record --bench "$BIN" --out "$OUT/interposer-h200.json" 2>&1 \
  | tee -a "$OUT/run.log" | tail -12
echo "record rc=${PIPESTATUS[0]}" | tee -a "$OUT/run.log"
