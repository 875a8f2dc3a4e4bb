#!/usr/bin/env bash
# One H200, one device call: the GPU tests, the lab's quick run (all families, all strategies), and
# `ccoverlap bench --comm emulate` (issue: workload suite) at 8 emulated ranks with every strategy,
# then at 2 emulated ranks with the model of the 2 x H200 NCCL run, for the comparison.
# usage (device tool, nvidia-h200): CCOVERLAP_COMMIT=<sha> bash bench/device/emulate.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; R=$OUT/r; mkdir -p "$R"
exec > >(tee "$OUT/log") 2>&1
save() { tar czf "$OUT/results.tgz" -C "$R" .; date; }  # after every step: a cut run keeps what it measured
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader; date
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_*_gpu.py 2>&1 | tee "$R/pytest-gpu.log" | tail -12; save
timeout 70 ccoverlap lab --quick --out "$R/lab-quick.json" 2>&1 | tail -60; save
MODEL="--layers 4 --d-model 2048 --heads 16 --seq 1024 --batch 4 --steps ${STEPS:-20} --warmup 5"
timeout 230 ccoverlap bench --comm emulate --emulate-world 8 --workload all $MODEL --json "$R/bench-emulate-w8.json"; save
timeout 120 ccoverlap bench --comm emulate --emulate-world 2 --workload all $MODEL \
  --strategies no-overlap,default,priority,shape,priority+shape --json "$R/bench-emulate-w2.json"; save
