#!/usr/bin/env bash
# One H200, one device call: `ccoverlap tune` as a user runs it, on the bench's training scripts (one GPU, 8 ranks
# emulated), one run per argument NAME:BUDGET_MIN:BUSBW:WORKLOAD[:TRAIN_ARGS] (NAME nothing-helps: the doctor's test
# program on the GPU, no communication). Each run's folder (tune.json, tune.png, policy.json, every trial's step
# records and output; no traces) comes back as $OUT/NAME.tgz (the device returns few files).
# usage (device tool): CCOVERLAP_COMMIT=<full sha> bash bench/device/tune_runs.sh diloco-40:4:40:diloco ddp-40:2.5:40:ddp
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
exec > >(tee -a "$OUT/log") 2>&1
for spec in "$@"; do
  IFS=: read -r name budget bw workload extra <<<"$spec"
  if [ "$name" = nothing-helps ]; then cmd=(python3 tests/data/doctor_train.py --cuda --steps 100000)
  else cmd=(python3 -m ccoverlap.bench.train "$workload" --busbw "$bw" --steps 100000 $extra); fi
  echo "== $name: budget $budget min: ${cmd[*]}"; date
  timeout $(python3 -c "print(int(float('$budget') * 60 + 60))") ccoverlap tune --budget "$budget" --skip 5 --steps 12 \
    --out "/tmp/tune-$name" -- "${cmd[@]}" \
    | grep -v '^not tried' | tail -40
  echo "tune exit: ${PIPESTATUS[0]}"
  tar czf "$OUT/$name.tgz" --exclude='*_trace.json.gz' -C /tmp "tune-$name"
done
date
