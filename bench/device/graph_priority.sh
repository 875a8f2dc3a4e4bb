#!/usr/bin/env bash
# Issue 27's graph_dispatch headline: does priority reach a collective captured in a CUDA graph? On one H200:
# the graph's kernel nodes' priority attribute (graph_priority.py), then the doctor on graph_dispatch and on
# dispatch with priority on (TORCH_NCCL_HIGH_PRIORITY=1), so the replay's waits can be set beside the plain
# launches'. Back in $OUT: the probe's line, the doctors' JSON and folders.
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<sha> bash bench/device/graph_priority.sh
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
python3 bench/device/graph_priority.py | tee "$OUT/graph-priority-probe.json"
R=/tmp/gp; rm -rf "$R"; mkdir -p "$R"
for p in graph_dispatch dispatch; do
  TORCH_NCCL_HIGH_PRIORITY=1 timeout 120 ccoverlap doctor --skip 5 --steps 6 --out "$R/doctor-$p" \
    --json "$R/doctor-$p.json" -- python3 bench/known/$p.py > "$R/$p.log" 2>&1
  echo "$p: doctor rc=$?"; tail -n 3 "$R/$p.log"
done
tar czf "$OUT/graph-priority-files.tgz" -C "$R" .
