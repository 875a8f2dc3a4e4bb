#!/usr/bin/env bash
# One device call for the foundation issue: build, read the GPU and NCCL, validate the occupancy
# model against CUDA's API, run every test (GPU ones included). Writes everything under $OUT.
# usage (device tool): CCOVERLAP_COMMIT=<sha> bash bench/device/foundation.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; mkdir -p "$OUT"
KERNELS=${KERNELS:-100}
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"

ccoverlap info --nccl --json > "$OUT/info.json"; echo "info rc=$?"
lib=$(python3 -c "from ccoverlap.model.nccl import find_libnccl; print(find_libnccl() or '')")
[ -n "$lib" ] && cuobjdump --dump-resource-usage "$lib" 2>&1 | gzip > "$OUT/cuobjdump-nccl.txt.gz"

time ccoverlap occupancy --validate "$KERNELS" --shapes 16 --seed 20261130 --out "$OUT/occupancy-h200.json"
echo "validate rc=$?"

for spec in threads=256,regs=16 threads=256,regs=32 threads=512,regs=32; do
  ccoverlap plan --device cuda --compute "$spec" --comm nccl
done > "$OUT/plan-examples.txt" 2>&1

python3 -m pytest -q -m gpu -v -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest-gpu.log" | tail -15
python3 -m pytest -q -p no:cacheprovider tests 2>&1 | tail -3 | tee -a "$OUT/pytest-gpu.log"
