#!/usr/bin/env bash
# One H200 call for the what-if simulator on the bench's DDP workload (issue 23, run 2): for each bus bandwidth
# (280 and 40 GB/s, 8 ranks emulated), `ccoverlap doctor` on `python -m ccoverlap.bench.train ddp` (the capture
# `ccoverlap whatif` predicts from, with its alone window) and `ccoverlap bench` measuring the same workload under
# default, priority, priority+shape and nccl-ctas+nccl-threads (2 process sets each). Predictions are made on the
# CPU from the captures. Back in $OUT: ddp-<busbw>.tgz (the doctor's folder), bench-ddp-<busbw>.json, log.
# usage (device tool, nvidia-h200, carry .whl): CCOVERLAP_COMMIT=<full sha> bash bench/device/whatif_bench.sh
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
exec > >(tee "$OUT/log") 2>&1
W=/tmp/whatif-bench; rm -rf "$W"; mkdir -p "$W"
for BW in 280 40; do
  timeout 100 ccoverlap doctor --comm-regex '^comm_paced$' --skip 5 --steps 3 --out "$W/ddp-$BW" \
    --json "$W/doctor-$BW.json" -- python3 -m ccoverlap.bench.train ddp --busbw "$BW" --steps 20 2>&1 | tail -25
  echo "doctor $BW exit: ${PIPESTATUS[0]}"; date
  tar czf "$OUT/ddp-$BW.tgz" -C "$W" "ddp-$BW" "doctor-$BW.json" 2>/dev/null
  timeout 110 ccoverlap bench --comm emulate --busbw "$BW" --workload ddp --repeats 2 \
    --strategies default,priority,priority+shape,nccl-ctas+nccl-threads --json "$OUT/bench-ddp-$BW.json" 2>&1 | tail -20
  echo "bench $BW exit: ${PIPESTATUS[0]}"; date
done
ls -la "$OUT"
