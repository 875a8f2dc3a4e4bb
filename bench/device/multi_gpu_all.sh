#!/usr/bin/env bash
# Multi-GPU validation (issue: multi-GPU validation) in ONE device call: every bench workload under
# every strategy at world size = all GPUs, real NCCL with multicast off, a torch.profiler trace per
# rank, strategy and workload (ddp's brought back), and the interposer's stats (in the shaped rows). One set of fresh
# ranks per strategy runs all five workloads, so eight start-ups fit the call's 10 minutes. The JSON
# is rewritten after every strategy, so a run cut by the timeout keeps what it measured.
# usage (device tool, nvidia-h200-x2 or larger): CCOVERLAP_COMMIT=<sha> bash bench/device/multi_gpu_all.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; R=$OUT/r; mkdir -p "$R"
exec > >(tee "$OUT/log") 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
N=$(nvidia-smi -L | wc -l); echo "GPUs: $N"; nvidia-smi topo -m; date
timeout ${BENCH_TIMEOUT:-480} ccoverlap bench --workload all --comm nccl --strategies "${STRATEGIES:-no-overlap,default,priority,shape,priority+shape,sm-carveout+priority,nccl-ctas+nccl-threads,max-connections}" \
  --layers 4 --d-model 2048 --heads 16 --seq 1024 --batch 4 --steps 10 --warmup 3 \
  --trace "$R/traces" --json "$R/bench-x$N.json"
echo "bench exit: $?"; date
# every workload is traced, but only ddp's traces (about 3.5 MB) fit what a device call brings back
tar czf "$OUT/results.tgz" -C "$R" --exclude='traces/fsdp' --exclude='traces/tp' --exclude='traces/moe' --exclude='traces/micro' .
