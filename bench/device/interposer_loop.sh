#!/usr/bin/env bash
# Issue 29.4 on the device machine's 16 cores (CPU work only, the GPU idle): CHAINS copies of bench/ci/interposer_loop.py
# at once, each a chain of pytest sessions of the interposer's test modules until its MINUTES run out or a session
# fails; the first chain also starts the two spinning processes, so the cores are busier than CI's. Back in $OUT:
# the chains folded into one record by bench/summarize/interposer_loop.py, the chains' files in one archive, the log.
# usage (device tool): CCOVERLAP_COMMIT=<full sha> bash bench/device/interposer_loop.sh [CHAINS [MINUTES [REPS]]]
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
exec > >(tee "$OUT/log") 2>&1
CHAINS=${1:-10}; MINUTES=${2:-5}; REPS=${3:-5}  # REPS: copies of the modules per pytest session
# the chains write outside $OUT (the copy-back takes a few files only): folded there once all have ended. MINUTES
# is when a chain's last session may start: on the device, a copy of the modules takes about 100 s with 24 chains
# on its 16 cores, so a chain ends up to REPS x 100 s later; keep MINUTES + that within the call's limit.
CHAINDIR=/tmp/interposer-chains; rm -rf "$CHAINDIR"; mkdir -p "$CHAINDIR"
for i in $(seq 1 "$CHAINS"); do
  python3 bench/ci/interposer_loop.py --out "$CHAINDIR/chain-$i.json" --minutes "$MINUTES" --reps "$REPS" \
    --spinners "$([ "$i" = 1 ] && echo 2 || echo 0)" > "$CHAINDIR/chain-$i.log" 2>&1 &
done
wait
tail -qn 1 "$CHAINDIR"/chain-*.log; uptime
python3 bench/summarize/interposer_loop.py "$CHAINDIR"/chain-*.json --gpu-host "the H200 device machine ($(nproc) cores)" \
  --out "$OUT/interposer-loop.json"
tar czf "$OUT/chains.tgz" -C "$CHAINDIR" .
