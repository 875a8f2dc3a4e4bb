#!/usr/bin/env bash
# One H200 call for what the levers issue (12) still needs on a GPU, after the lab's first lever run:
# the bench's and `ccoverlap run --strategy`'s GPU tests, the emulated bench under lever strategies, the lab's
# carveout and persistent-gemm cases again (more strategies), the carveout hint's cost per compute family, and
# lab traces with known waits for the doctor (issue 13). Each step has its own time limit; all lands under $OUT.
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<sha> bash bench/device/levers_all.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; mkdir -p "$OUT/cases"
if ls .whl/*.whl >/dev/null 2>&1; then  # ijson (the trace parser) is not in the device image
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader; date
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_bench_gpu.py tests/test_run_strategy.py \
  tests/test_lab_gpu.py 2>&1 | tee "$OUT/pytest-gpu.log" | tail -6; date
for case in carveout persistent-gemm; do
  timeout 90 ccoverlap lab --case "$case" --out "$OUT/cases/lab-$case.json" --no-plots 2>&1 | tail -22
done
timeout 60 ccoverlap lab --compute fma --comm nccl --strategies default,priority,priority+shape --orders with \
  --reps 10 --trace "$OUT/traces" --out "$OUT/cases/lab-traced-fma.json" --no-plots 2>&1 | tail -3
timeout 60 ccoverlap lab --case carveout --strategies default,carveout-hint=60 --reps 10 --trace "$OUT/traces" \
  --out "$OUT/cases/lab-traced-carveout.json" --no-plots 2>&1 | tail -3
tar czf "$OUT/lab-traces.tgz" -C "$OUT" traces && rm -rf "$OUT/traces"; date
timeout 90 python3 bench/device/carveout_cost.py "$OUT/carveout-cost.json" 2>&1 | tail -8; date
timeout 200 ccoverlap bench --comm emulate --emulate-world 8 --workload ddp,fsdp,moe \
  --strategies no-overlap,default,priority,priority+shape,nccl-cluster,nccl-ctas+nccl-threads,carveout-hint+priority,sm-carveout+priority,nccl-cta-policy \
  --layers 4 --d-model 2048 --heads 16 --seq 1024 --batch 4 --steps 10 --warmup 3 \
  --json "$OUT/bench-emulate-levers-w8.json" 2>&1 | tail -40; echo "bench exit: $?"; date
