#!/usr/bin/env bash
# One H200, one device call for issue 19: the known-answer programs (bench/known/) plain and under every lever,
# `ccoverlap doctor` on each, `ccoverlap tune` on as many as the time allows; everything under $OUT, the summary
# in $OUT/known-answers-2026-12-02-h200.json (bench/device/known_answers.py).
# usage (device tool, nvidia-h200): CCOVERLAP_COMMIT=<full sha> bash bench/device/known_answers.sh [BUDGET_S]
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
exec > >(tee "$OUT/log") 2>&1
python3 bench/device/known_answers.py --out "$OUT/known" --budget-s "${1:-330}"
echo "known_answers exit: $?"; date
cp "$OUT/known/known-answers.json" "$OUT/known-answers-2026-12-02-h200.json"
# the doctors' and tuners' folders (traces, step records, interposer stats), without the per-run JSONs
tar czf "$OUT/known-files.tgz" -C "$OUT/known" --exclude='*-plain-*.json' $(cd "$OUT/known" && ls -d doctor-* tune-* 2>/dev/null)
ls -la "$OUT"
