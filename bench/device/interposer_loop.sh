#!/usr/bin/env bash
# Issue 29.4 on the device machine's 16 cores (CPU work only, the GPU idle): CHAINS copies of bench/ci/interposer_loop.py
# at once, each a chain of pytest sessions of the interposer's test modules until its MINUTES run out or a session
# fails; the first chain also starts the two spinning processes, so the cores are busier than CI's. Back in $OUT:
# each chain's record and the log; bench/summarize/interposer_loop.py folds them into one record.
# usage (device tool): CCOVERLAP_COMMIT=<full sha> bash bench/device/interposer_loop.sh [CHAINS [MINUTES]]
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
exec > >(tee "$OUT/log") 2>&1
CHAINS=${1:-10}; MINUTES=${2:-5}
for i in $(seq 1 "$CHAINS"); do
  python3 bench/ci/interposer_loop.py --out "$OUT/chain-$i.json" --minutes "$MINUTES" \
    --spinners "$([ "$i" = 1 ] && echo 2 || echo 0)" > "$OUT/chain-$i.log" 2>&1 &
done
wait
tail -n 2 "$OUT"/chain-*.log; uptime
