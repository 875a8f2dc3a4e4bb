#!/usr/bin/env bash
# Issue 27: graph_dispatch's extra wave under priority. Hypothesis (the occupancy model's carveout rule, read
# backwards): in the graph's replay the collective and the 20-wave grid become ready at the same moment, the
# high-priority collective's CTAs are dispatched first onto idle SMs, each such SM takes the configuration the
# collective's 8 KB CTAs ask for (100 KB), and the grid's 100 KB blocks cannot start there until the CTA ends.
# Test: the same runs with the collective's carveout hint at 100 (the SM then takes the largest configuration),
# set by bench/device/comm_hint.py, and under the strategies in $LEVERS (`ccoverlap run --strategy`, e.g. the
# comm-carveout-hint lever). graph_dispatch and dispatch, 30 steps each, interleaved, twice; then the doctor on
# graph_dispatch under priority with the hint, and the doctor (no lever) on the programs in $DOCTOR.
# Everything comes back in one archive, $OUT/comm-hint-files.tgz (runs/NAME.json and .log, doctor-*/).
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<sha> [STRATS="default priority"] [LEVERS="s1 s2"]
#   [DOCTOR="graph_dispatch threads"] bash bench/device/comm_hint.sh
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
R=/tmp/ch; rm -rf "$R"; mkdir -p "$R/runs"
one() {  # name, strategy, then the command
  local name=$1 s=$2; shift 2
  timeout 90 ccoverlap run --strategy "$s" -- "$@" --steps 30 --json "$R/runs/$name.json" > "$R/runs/$name.log" 2>&1
  echo "$name: rc=$? $(tail -1 "$R/runs/$name.log")"
}
for rep in 1 2; do
  for p in graph_dispatch dispatch; do
    for s in ${STRATS:-default priority}; do
      one "$p-$s-hint_none-$rep" "$s" python3 "bench/known/$p.py"
      one "$p-$s-hint_100-$rep" "$s" python3 bench/device/comm_hint.py 100 "$p"
    done
    for s in ${LEVERS:-}; do
      one "$p-${s//+/_}-lever-$rep" "$s" python3 "bench/known/$p.py"
    done
  done
done
TORCH_NCCL_HIGH_PRIORITY=1 timeout 120 ccoverlap doctor --skip 5 --steps 6 --out "$R/doctor-graph_dispatch-hint_100" \
  --json "$R/doctor-graph_dispatch-hint_100.json" -- python3 bench/device/comm_hint.py 100 graph_dispatch \
  > "$R/doctor-hint.log" 2>&1
echo "doctor with the hint: rc=$?"; tail -n 2 "$R/doctor-hint.log"
for p in ${DOCTOR:-}; do
  timeout 120 ccoverlap doctor --skip 5 --steps 6 --out "$R/doctor-$p" --json "$R/doctor-$p.json" \
    -- python3 "bench/known/$p.py" > "$R/doctor-$p.log" 2>&1
  echo "doctor $p: rc=$?"; grep -m1 'verdict' "$R/doctor-$p.log" | cut -c1-400
done
tar czf "$OUT/comm-hint-files.tgz" -C "$R" .
