#!/usr/bin/env bash
# One H200, one device call for issue 19: the known-answer programs (bench/known/) plain and under every lever,
# `ccoverlap doctor` on each, `ccoverlap tune` on as many as the time allows (bench/device/known_answers.py). Back
# in $OUT: the log, the summary (known-answers-2026-12-02-h200.json) and the doctors' and tuners' folders (a tgz).
# usage (device tool, nvidia-h200): CCOVERLAP_COMMIT=<full sha> bash bench/device/known_answers.sh [BUDGET_S [NAME [ARGS...]]]
# NAME: the summary's file name part (default known-answers-2026-12-02-h200); ARGS go to known_answers.py (--programs, --tune)
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
exec > >(tee "$OUT/log") 2>&1
WORK=/tmp/known-answers; rm -rf "$WORK"  # a warm machine keeps the last call's folders, which the tgz would carry again
NAME=${2:-known-answers-2026-12-02-h200}
python3 bench/device/known_answers.py --out "$WORK" --budget-s "${1:-300}" "${@:3}"
echo "known_answers exit: $?"; date
cp "$WORK/known-answers.json" "$OUT/$NAME.json"
tar czf "$OUT/known-files.tgz" -C "$WORK" $(cd "$WORK" && ls -d doctor-* tune-* 2>/dev/null)
ls -la "$OUT"
