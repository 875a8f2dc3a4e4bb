#!/usr/bin/env bash
# One H200 call for the what-if simulator (issue 23): `ccoverlap lab --quick` (every family x the nccl proxy x
# every lab strategy, launched `with`), then bench/device/whatif_record.py (each family's compute phase alone
# under the profiler, the nccl proxy alone at several CTA and thread counts). Measurements only: the predictions
# are made on the CPU from these files (bench/summarize/whatif.py), so they can be recomputed at any commit
# from the record. Back in $OUT: lab-quick.json, whatif-capture.json, traces.tgz, log.
# usage (device tool, nvidia-h200, carry .whl): CCOVERLAP_COMMIT=<full sha> bash bench/device/whatif.sh
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
exec > >(tee "$OUT/log") 2>&1
W=/tmp/whatif; rm -rf "$W"; mkdir -p "$W"
timeout 240 ccoverlap lab --quick --out "$OUT/lab-quick.json" --no-plots 2>&1 | tail -80; echo "lab exit: ${PIPESTATUS[0]}"; date
timeout 150 python3 bench/device/whatif_record.py --out "$W"; echo "record exit: $?"; date
cp "$W/whatif-capture.json" "$OUT/" 2>/dev/null
tar czf "$OUT/traces.tgz" -C "$W" traces 2>/dev/null
ls -la "$OUT"
