#!/usr/bin/env bash
# Second multi-GPU call: the workloads the first call's time limit cut off (micro, fsdp, tp, moe),
# with fewer strategies so each fits. usage: CCOVERLAP_COMMIT=<sha> bash bench/device/multi_gpu_rest.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; R=$OUT/r; mkdir -p "$R"
exec > >(tee "$OUT/log") 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
MODEL="--layers 4 --d-model 2048 --heads 16 --seq 1024 --batch 4 --steps 10 --warmup 3"
for w in micro fsdp tp moe; do
  date
  timeout 85 ccoverlap bench --workload $w $MODEL --strategies no-overlap,default,priority,priority+shape --json "$R/bench-$w.json"
done
tar czf "$OUT/results.tgz" -C "$R" .
