#!/usr/bin/env bash
# One H200 call for the doctor (issue 13) and the rest of the levers' GPU tests: the GPU tests of the doctor
# and the bench; the overhead and identical-loss check (doctor_check.py: DDP on NCCL, world 1); a Hugging Face
# GPT-2 trained alone and under `ccoverlap doctor`; lab traces with known waits (fma + nccl proxy: default,
# priority; sparse + AllReduce proxy: default, carveout-hint=60) for checking the analysis. Lands under $OUT.
# usage (device tool, carry .whl): CCOVERLAP_COMMIT=<sha> bash bench/device/doctor_h200.sh
set -uo pipefail
source "$(dirname "$0")/prologue.sh"
R=$OUT/r; mkdir -p "$R"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_doctor.py \
  "tests/test_bench_gpu.py::test_the_interposer_sees_the_proxy_launch_nccls_footprint" 2>&1 | tee "$OUT/pytest-gpu.log" | tail -5; date
timeout 150 ccoverlap lab --compute fma --comm nccl --strategies default,priority --orders with --reps 10 \
  --trace "$R/traces" --out "$R/lab-traced-fma.json" --no-plots 2>&1 | tail -2
timeout 60 ccoverlap lab --case carveout --strategies default,carveout-hint=60 --reps 10 --trace "$R/traces" \
  --out "$R/lab-traced-carveout.json" --no-plots 2>&1 | tail -2; date
timeout 120 python3 bench/device/doctor_hf.py --steps 25 > "$R/hf-plain.log" 2>&1; echo "hf plain rc=$?"
timeout 150 ccoverlap doctor --steps 3 --skip 12 --out "$R/hf-doctor" --json "$R/hf-doctor.json" --report "$R/hf-doctor.html" \
  -- python3 bench/device/doctor_hf.py --steps 25 > "$R/hf-doctor.log" 2>&1; echo "hf doctor rc=$?"; tail -25 "$R/hf-doctor.log"; date
timeout 200 python3 bench/device/doctor_check.py --out "$R/check" --nproc 1 --runs 2 --steps 40 --skip 15 2>&1 | tail -12; date
cp "$R/check/doctor-check.json" "$OUT/" 2>/dev/null
tar czf "$OUT/doctor-h200.tgz" -C "$R" . ; ls -la "$OUT"
