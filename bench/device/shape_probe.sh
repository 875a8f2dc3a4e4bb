#!/usr/bin/env bash
# One device call: why shape slows some held-out programs (bench/device/shape_probe.py); back in $OUT: the log,
# shape-probe.json and the doctor captures (a tgz).
# usage (device tool): CCOVERLAP_COMMIT=<full sha> bash bench/device/shape_probe.sh [ARGS...]
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
exec > >(tee "$OUT/log") 2>&1
WORK=/tmp/shape-probe; rm -rf "$WORK"  # a warm machine keeps the last call's folders, which the tgz would carry again
python3 bench/device/shape_probe.py --out "$WORK" "$@"
echo "shape_probe exit: $?"; date
cp "$WORK/shape-probe.json" "$OUT/"
tar czf "$OUT/shape-probe-files.tgz" -C "$WORK" $(cd "$WORK" && ls -d doctor-* stats-* 2>/dev/null)
ls -la "$OUT"
