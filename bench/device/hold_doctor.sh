#!/usr/bin/env bash
# The doctor on known-answer programs with its hold before each profiled step (--hold on, the default) and
# without (--hold off), then the hold's GPU tests. Folders, JSONs and the log back in $OUT
# (hold-doctor-files.tgz, pytest-hold.log, provenance.json); summarized by bench/summarize/hold_doctor.py.
# usage (device tool): CCOVERLAP_COMMIT=<sha> [HOLDS="on"] bash bench/device/hold_doctor.sh PROGRAM...
# HOLDS: which holds to capture, in order (default "off on"; "on" alone where the unheld capture exists already)
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
exec > >(tee "$OUT/log") 2>&1
W=/tmp/hold-doctor; rm -rf "$W"; mkdir -p "$W"  # a warm machine keeps the last call's folders
python3 -c "import json; from ccoverlap.gpu import provenance; print(json.dumps(provenance.collect()))" > "$OUT/provenance.json"
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_doctor_hold.py 2>&1 | tee "$OUT/pytest-hold.log" | tail -5
for p in "$@"; do
  for hold in ${HOLDS:-off on}; do
    tag="$p@hold-$hold"
    start=$(date +%s)
    timeout 240 python3 -m ccoverlap doctor --hold "$hold" --skip 5 --steps 6 --out "$W/doctor-$tag" \
      --json "$W/doctor-$tag.json" -- python3 "bench/known/$p.py" --steps 20 | grep -E "^verdict|^hold|launches rank"
    echo "$tag exit ${PIPESTATUS[0]} in $(( $(date +%s) - start )) s"
  done
done
tar czf "$OUT/hold-doctor-files.tgz" -C "$W" .
