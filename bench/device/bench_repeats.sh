#!/usr/bin/env bash
# One H200, one device call for issue 21. Run 1: the default `ccoverlap bench` (every workload, the default
# strategies no-overlap, default, priority, priority+shape, 3 process sets each, 8 ranks emulated at 280 GB/s):
# its wall time against the 8-minute target, and the FSDP case's first run. Run 2: the FSDP case again, in a
# bench of its own (the same four strategies, 3 process sets each). Both JSON (provenance, every process set's
# steps per rank) and their charts under $OUT, with the log.
# The call must end within the session's device time: DEADLINE seconds from here (default 410) for both runs;
# run 1 leaves RESERVE seconds (default 110) for run 2, which gets whatever is left.
# usage (device tool, nvidia-h200): CCOVERLAP_COMMIT=<full sha> bash bench/device/bench_repeats.sh [DEADLINE] [RESERVE]
set -uo pipefail
start=$(date +%s)
source "$(dirname "$0")/prologue.sh"
exec > >(tee "$OUT/log") 2>&1
DEADLINE=${1:-410}; RESERVE=${2:-110}
left() { echo $(( DEADLINE - ($(date +%s) - start) )); }

t1=$(( $(left) - RESERVE ))
echo "run 1: the default bench, at most ${t1} s"; s1=$(date +%s.%N)
timeout --signal=INT -k 10 "$t1" ccoverlap bench --json "$OUT/bench-default-h200.json" > "$OUT/bench-default-h200.txt" 2>&1
code1=$?; e1=$(date +%s.%N)
tail -45 "$OUT/bench-default-h200.txt"
echo "run 1 exit $code1, wall $(python3 -c "print(f'{$e1 - $s1:.1f}')") s"; date

t2=$(left)
echo "run 2: the FSDP case alone, at most ${t2} s"; s2=$(date +%s.%N)
timeout --signal=INT -k 10 "$t2" ccoverlap bench --comm emulate --busbw 280 --workload fsdp \
  --strategies no-overlap,default,priority,priority+shape --json "$OUT/bench-fsdp-h200.json" > "$OUT/bench-fsdp-h200.txt" 2>&1
code2=$?; e2=$(date +%s.%N)
tail -14 "$OUT/bench-fsdp-h200.txt"
echo "run 2 exit $code2, wall $(python3 -c "print(f'{$e2 - $s2:.1f}')") s"; date
