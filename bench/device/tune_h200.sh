#!/usr/bin/env bash
# One H200, one device call for issue 14: the GPU tests of the tuner and the policy file, the emulated bench
# at 40 GB/s on every training workload with its verdicts against default (the "best single strategy" the
# tuner is held to), and the tuner on the bench's ddp training script at 40 GB/s. Everything under $OUT.
# usage (device tool, nvidia-h200): CCOVERLAP_COMMIT=<full sha> bash bench/device/tune_h200.sh [BUSBW] [WORKLOADS]
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
exec > >(tee "$OUT/log") 2>&1
BW=${1:-40}; WL=${2:-ddp,fsdp,tp,moe,diloco}
timeout 200 python3 -m pytest -q -m gpu -v -p no:cacheprovider tests/test_tune_gpu.py tests/test_tuned_gpu.py 2>&1 \
  | tee "$OUT/pytest-gpu.log" | tail -8; date
timeout 330 ccoverlap bench --comm emulate --busbw "$BW" --workload "$WL" \
  --strategies default,priority,shape,sm-carveout,nccl-cluster,nccl-ctas,carveout-hint,priority+shape \
  --json "$OUT/bench-emulate-$BW.json" | tail -60; echo "bench exit: $?"; date
