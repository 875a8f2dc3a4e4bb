#!/usr/bin/env bash
# Issue 15, one part per device call (nvidia-h200-x8, -x4 or -x2), real NCCL, multicast off, world size = all GPUs:
#   tune    `ccoverlap tune` on the bench's ddp training script under torchrun; the policy it keeps -> $OUT/tune.tgz
#   bench   every workload under the new levers beside the old strategies (and the tuned policy's levers, where
#           tune ran on this machine before: TUNED=<strategy>), JSON rewritten after every strategy
#   doctor  `ccoverlap doctor` on ddp and fsdp: per-rank attribution and the scheduling headroom
# DRY=1 runs the same commands on the CPU with gloo and two ranks (the tiny model): what CI's machine can check.
# usage: CCOVERLAP_COMMIT=<full sha> bash bench/device/multi_gpu_issue15.sh tune|bench|doctor
set -uo pipefail
PART=${1:?tune, bench or doctor}
if [ -n "${DRY:-}" ]; then
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
  OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"; N=2; TRAIN=(--device cpu --comm gloo --tiny); BENCH=(--device cpu --comm gloo --nproc 2 --tiny)
  BUDGET=${BUDGET:-1}
else
  source "$(dirname "$0")/prologue.sh"
  N=$(nvidia-smi -L | wc -l); nvidia-smi topo -m; TRAIN=(--comm nccl); BENCH=(--comm nccl); BUDGET=${BUDGET:-8}
fi
exec > >(tee -a "$OUT/log-$PART") 2>&1
echo "part $PART, $N ranks"; date
RUN=(torchrun --standalone --nproc-per-node "$N" -m ccoverlap.bench.train)
case $PART in
  tune)
    timeout $((${BUDGET%.*} * 60 + 120)) ccoverlap tune --budget "$BUDGET" --skip 5 --steps 12 --out /tmp/tune-ddp-x$N \
      -- "${RUN[@]}" ddp "${TRAIN[@]}" --steps 100000 | grep -v '^not tried'
    echo "tune exit: ${PIPESTATUS[0]}"
    tar czf "$OUT/tune.tgz" --exclude='*_trace.json.gz' -C /tmp "tune-ddp-x$N" ;;
  bench)
    timeout 560 ccoverlap bench --workload all "${BENCH[@]}" --steps 10 --warmup 3 \
      --strategies "no-overlap,default,priority,nccl-cluster,nccl-cta-policy,nccl-cta-policy=ZERO,carveout-hint${TUNED:+,$TUNED}" \
      --json "$OUT/bench-x$N.json" | tail -80
    echo "bench exit: ${PIPESTATUS[0]}" ;;
  doctor)
    for w in ddp fsdp; do
      timeout 240 ccoverlap doctor --skip 10 --steps 3 --out "/tmp/doctor-$w-x$N" --json "$OUT/doctor-$w-x$N.json" \
        -- "${RUN[@]}" "$w" "${TRAIN[@]}" --steps 20
      echo "doctor $w exit: $?"
    done ;;
  *) echo "part $PART: valid tune, bench, doctor"; exit 2 ;;
esac
date
