#!/usr/bin/env bash
# Issue 28's reach check, captured on one H200: `ccoverlap doctor` on the bench's ddp, fsdp and tp as training
# scripts under --comm emulate at 2 ranks and the 2 x H200 NVLink pace (280 GB/s), the model and batch of the
# 2 x H200 NCCL run (bench/results/bench-x2-h200-2026-11-30-*.json). Back in $OUT: each doctor's folder (traces,
# alone window, step records) as one archive, its JSON and log. `ccoverlap whatif` then reads the folders on any
# machine, and bench/summarize/reach.py sets its predictions beside the two-GPU record.
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<sha> [DOCTOR_ARGS="--hold on"] bash bench/device/reach.sh [WORKLOADS]
# DOCTOR_ARGS go to the doctor: `--hold on` queues each profiled step's launches ahead of the GPU, as the unprofiled
# program does, so a capture the profiler would pace by the host can be simulated.
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
R=/tmp/reach; rm -rf "$R"; mkdir -p "$R"
SIZE=(--layers 4 --d-model 2048 --heads 16 --seq 1024 --batch 4)  # bench-x2-h200-2026-11-30's size
for w in ${1:-ddp fsdp tp}; do
  timeout 170 ccoverlap doctor ${DOCTOR_ARGS:-} --skip 5 --steps 8 --out "$R/$w" --json "$R/$w-doctor.json" -- \
    python3 -m ccoverlap.bench.train "$w" --comm emulate --emulate-world 2 --busbw 280 "${SIZE[@]}" --steps 40 \
    > "$R/$w.log" 2>&1
  echo "$w: doctor rc=$?"; tail -n 4 "$R/$w.log"; date
  tar czf "$OUT/reach-$w.tgz" -C "$R" "$w" "$w-doctor.json" "$w.log"
done
ls -la "$OUT"
