#!/usr/bin/env bash
# One H200 call for what the levers issue (12) still needs on a GPU, after the lab's first lever run:
# the bench's and `ccoverlap run --strategy`'s GPU tests, the emulated bench under lever strategies, the lab's
# carveout and persistent-gemm cases again (more strategies), the carveout hint's cost per compute family, and
# lab traces with known waits for the doctor (issue 13). Each step has its own time limit; all lands under $OUT.
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<sha> bash bench/device/levers_all.sh
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
mkdir -p "$OUT/cases"
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
