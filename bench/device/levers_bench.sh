#!/usr/bin/env bash
# One H200, one device call for issue 12 items 1 and 4 (the bench side): the GPU tests of the bench and of
# `ccoverlap run --strategy` (the emulated proxies launch NCCL's per-collective footprint: all-reduce 512 x 24
# in clusters of 4; NCCL_NTHREADS=256 gives all-reduce 256 and all-gather 288 threads; the interposer reads them
# back at launch; sm-carveout auto reaches torch), then the emulated bench under every registry strategy
# (green and nccl-cta-policy are n/a rows with their reasons). Everything lands under $OUT.
# usage (device tool, nvidia-h200): CCOVERLAP_COMMIT=<full sha> bash bench/device/levers_bench.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/log") 2>&1
if ls .whl/*.whl >/dev/null 2>&1; then  # ijson (the trace parser) is not in the device image
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader; date
timeout 240 python3 -m pytest -q -m gpu -v -p no:cacheprovider tests/test_bench_gpu.py tests/test_run_strategy.py 2>&1 \
  | tee "$OUT/pytest-gpu.log" | tail -20; date
timeout 300 ccoverlap bench --comm emulate --emulate-world 8 --workload ddp,fsdp,moe \
  --layers 4 --d-model 2048 --heads 16 --seq 1024 --batch 4 --steps 10 --warmup 3 \
  --json "$OUT/bench-emulate-levers-w8.json"; echo "bench exit: $?"; date
