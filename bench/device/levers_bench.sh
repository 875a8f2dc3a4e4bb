#!/usr/bin/env bash
# One H200, one device call for issue 12 items 1 and 4 (the bench side): the GPU tests of the bench and of
# `ccoverlap run --strategy` (the emulated proxies launch NCCL's per-collective footprint: all-reduce 512 x 24
# in clusters of 4; NCCL_NTHREADS=256 gives all-reduce 256 and all-gather 288 threads; the interposer reads them
# back at launch; sm-carveout auto reaches torch), then the emulated bench under every registry strategy
# (green and nccl-cta-policy are n/a rows with their reasons). Everything lands under $OUT.
# usage (device tool, nvidia-h200): CCOVERLAP_COMMIT=<full sha> bash bench/device/levers_bench.sh
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
exec > >(tee "$OUT/log") 2>&1
timeout 240 python3 -m pytest -q -m gpu -v -p no:cacheprovider tests/test_bench_gpu.py tests/test_run_strategy.py 2>&1 \
  | tee "$OUT/pytest-gpu.log" | tail -20; date
timeout 300 ccoverlap bench --comm emulate --emulate-world 8 --workload ddp,fsdp,moe \
  --layers 4 --d-model 2048 --heads 16 --seq 1024 --batch 4 --steps 10 --warmup 3 \
  --json "$OUT/bench-emulate-levers-w8.json"; echo "bench exit: $?"; date
