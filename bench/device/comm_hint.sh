#!/usr/bin/env bash
# Issue 27: graph_dispatch's extra wave under priority. Hypothesis (the occupancy model's carveout rule, read
# backwards): in the graph's replay the collective and the 20-wave grid become ready at the same moment, the
# high-priority collective's CTAs are dispatched first onto idle SMs, each such SM takes the configuration the
# collective's 8 KB CTAs ask for (100 KB), and the grid's 100 KB blocks cannot start there until the CTA ends.
# Test: the same runs with the collective's carveout hint at 100 (the SM then takes the largest configuration).
# graph_dispatch and dispatch, plain and under priority, with and without the hint, 30 steps each, interleaved,
# twice; each run's step times and losses in $OUT.
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<sha> bash bench/device/comm_hint.sh
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
for rep in 1 2; do
  for s in default priority; do
    for p in graph_dispatch dispatch; do
      for h in none 100; do
        name="$p-$s-hint_$h-$rep"
        if [ "$h" = none ]; then cmd=(python3 "bench/known/$p.py"); else cmd=(python3 bench/device/comm_hint.py "$h" "$p"); fi
        timeout 90 ccoverlap run --strategy "$s" -- "${cmd[@]}" --steps 30 --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1
        echo "$name: rc=$? $(tail -1 "$OUT/$name.log")"
      done
    done
  done
done
# where the replay's kernels ran with the hint: the doctor on graph_dispatch under priority (as graph_priority.sh)
R=/tmp/ch; rm -rf "$R"; mkdir -p "$R"
TORCH_NCCL_HIGH_PRIORITY=1 timeout 120 ccoverlap doctor --skip 5 --steps 6 --out "$R/doctor-graph_dispatch-hint_100" \
  --json "$R/doctor-graph_dispatch-hint_100.json" -- python3 bench/device/comm_hint.py 100 graph_dispatch \
  > "$R/doctor.log" 2>&1
echo "doctor rc=$?"; tail -n 3 "$R/doctor.log"
tar czf "$OUT/comm-hint-files.tgz" -C "$R" .
