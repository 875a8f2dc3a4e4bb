#!/usr/bin/env bash
# Issue 27, after graph_priority.sh: is it the shared-memory carveout that slows graph_dispatch's grid beside the
# collective under priority? graph_dispatch and dispatch plain, under priority and under carveout-hint+priority
# (`ccoverlap run --strategy`), 30 steps each, their step times and losses back in $OUT (one JSON per run, a strategy's + as _).
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<sha> bash bench/device/graph_priority_runs.sh
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
for s in default priority carveout-hint+priority; do
  for p in graph_dispatch dispatch; do
    timeout 90 ccoverlap run --strategy "$s" -- python3 "bench/known/$p.py" --steps 30 --json "$OUT/$p-${s//+/_}.json" \
      > /dev/null 2>&1
    echo "$p $s: rc=$?"
  done
done
ls "$OUT"
