#!/usr/bin/env bash
# Every GPU test of the suite on one device call (the record of a commit's GPU tests): the log, with the versions
# line bench/summarize/pytest_gpu.py reads, back in $OUT. Extra ARGS go to pytest (a module, -k).
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<sha> bash bench/device/gpu_tests.sh [ARGS...]
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1 > "$OUT/pytest-gpu.log"
python3 -c 'import json, torch; print("versions", json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
    "nccl": ".".join(map(str, torch.cuda.nccl.version()))}))' | tee -a "$OUT/pytest-gpu.log"
timeout 480 python3 -m pytest -q -m gpu -p no:cacheprovider -rs --durations=0 "${@:-tests}" 2>&1 | tee -a "$OUT/pytest-gpu.log" | tail -15
