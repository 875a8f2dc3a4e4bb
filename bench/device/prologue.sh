# Sourced by the one-call device scripts: multicast off (shared machines), unbuffered output, $OUT, the
# carried wheels (msgspec and orjson, which the trace reader and the JSON output need, are not in the device image;
# make them with `pip download msgspec orjson ijson rich -d .whl --only-binary :all: --python-version 3.12` and
# carry .whl), ccoverlap built in place, and the GPU's name, driver, clocks and temperature on the log.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ccoverlap-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader; date
# the device's copy of the tree may carry a stale git HEAD: provenance is right only with CCOVERLAP_COMMIT set
[ -n "${CCOVERLAP_COMMIT:-}" ] || echo "warning: CCOVERLAP_COMMIT is not set: provenance records the device copy's git HEAD, which may be stale"
