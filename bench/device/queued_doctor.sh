#!/usr/bin/env bash
# The doctor on known-answer programs twice: as they run (the profiler may pace their steps by the host) and with
# the GPU held before each step (bench/known/common.py --hold-ms), so the step's launches queue ahead of the GPU as
# they do unprofiled. Folders, JSONs and the log back in $OUT (queued-doctor-files.tgz).
# usage (device tool): CCOVERLAP_COMMIT=<sha> bash bench/device/queued_doctor.sh HOLD_MS PROGRAM...
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
exec > >(tee "$OUT/log") 2>&1
HOLD=$1; shift
W=/tmp/queued-doctor; mkdir -p "$W"
for p in "$@"; do
  for hold in 0 "$HOLD"; do
    tag="$p@hold$hold"
    timeout 240 python3 -m ccoverlap doctor --skip 5 --steps 6 --out "$W/doctor-$tag" --json "$W/doctor-$tag.json" -- \
      python3 "bench/known/$p.py" --steps 20 --hold-ms "$hold" | grep -E "^verdict|launches rank" ; echo "$tag exit ${PIPESTATUS[0]}"
  done
done
tar czf "$OUT/queued-doctor-files.tgz" -C "$W" .
