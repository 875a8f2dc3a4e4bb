#!/usr/bin/env bash
# Multi-GPU run with real NCCL (issue: multi-GPU validation) in one device call:
# traces for `ccoverlap analyze`, every bench workload under the strategies, the NCCL footprint the
# interposer saw at launch. Bounded to ~9 minutes; each bench JSON is rewritten after every
# strategy ("complete": false until the end), so a workload cut by its timeout keeps what it measured. Everything lands in $OUT/results.tgz and $OUT/log.
# usage (device tool, nvidia-h200-x2 or larger): CCOVERLAP_COMMIT=<sha> bash bench/device/multi_gpu.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; R=$OUT/r; mkdir -p "$R"
exec > >(tee "$OUT/log") 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
N=$(nvidia-smi -L | wc -l); echo "GPUs: $N"; nvidia-smi topo -m
MODEL="--layers 4 --d-model 2048 --heads 16 --seq 1024 --batch 4 --steps 10 --warmup 3"
timeout 90 torchrun --nproc-per-node "$N" bench/device/record_traces.py --out "$R/traces"
ccoverlap analyze "$R/traces" --baseline "$R/traces/no-overlap" --json > "$R/analyze.json"
timeout 140 ccoverlap bench --workload ddp $MODEL --trace "$R/bench-traces" --json "$R/bench-ddp.json"
for w in micro fsdp tp moe; do
  timeout 75 ccoverlap bench --workload $w $MODEL --strategies no-overlap,default,priority,shape,priority+shape,nccl-ctas+nccl-threads \
    --json "$R/bench-$w.json"
done
tar czf "$OUT/results.tgz" -C "$R" .
