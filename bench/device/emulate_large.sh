#!/usr/bin/env bash
# One H200, one short device call: the emulated bench (8 ranks) for fsdp, tp and moe with a batch 8x
# larger than emulate.sh's, so that the GPU rather than the host paces the step; four strategies.
# usage (device tool, nvidia-h200): CCOVERLAP_COMMIT=<sha> bash bench/device/emulate_large.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/log") 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2; date
timeout 190 ccoverlap bench --comm emulate --emulate-world 8 --workload fsdp,tp,moe \
  --layers 4 --d-model 2048 --heads 16 --seq 1024 --batch 32 --steps 15 --warmup 5 \
  --strategies default,priority,priority+shape,sm-carveout+priority --json "$OUT/bench-emulate-w8-batch32.json"; date
