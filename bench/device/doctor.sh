#!/usr/bin/env bash
# The doctor on GPUs (issue 13, item 4), in one device call: the GPU tests of tests/test_doctor.py, then
# the overhead and identical-loss check (bench/device/doctor_check.py: DDP on NCCL, alone and under
# `ccoverlap doctor`, 3 runs each), then the doctor's own verdict on one run. Everything lands in
# $OUT/doctor.tgz and $OUT/log (bounded to 9 minutes; about 3-5 expected on 2 x H200, not yet run).
# usage (device tool, nvidia-h200-x2): CCOVERLAP_COMMIT=<sha> bash bench/device/doctor.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; R=$OUT/doctor; mkdir -p "$R"
exec > >(tee "$OUT/log") 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
N=$(nvidia-smi -L | wc -l); echo "GPUs: $N"
timeout 150 python3 -m pytest -q -m gpu tests/test_doctor.py 2>&1 | tail -15
timeout 380 python3 bench/device/doctor_check.py --out "$R" --nproc "$N"
echo "check rc=$?"
cat "$R/doctor0.log" | grep -v "^rank [0-9]* step" | tail -40
tar czf "$OUT/doctor.tgz" -C "$R" .
