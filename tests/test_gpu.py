"""GPU checks, run on the device (bench/device/foundation.sh); they skip without CUDA."""
import time

import pytest

from ccoverlap.model.limits import PRESETS, read_live
from ccoverlap.model.nccl import find_cuobjdump, find_libnccl, nccl_footprint

pytestmark = pytest.mark.gpu


def test_live_limits_equal_the_preset_of_this_gpu():
    live = read_live(0)
    preset = next((p for key, p in PRESETS.items() if key in live.name.lower().replace(" ", "")), None)
    if preset is None:
        pytest.skip(f"no preset for {live.name}")
    for field in preset.__dataclass_fields__:
        if field not in ("name", "source"):
            assert getattr(live, field) == getattr(preset, field), field


def test_fresh_random_sample_matches_cuda_occupancy_api():
    cupy = pytest.importorskip("cupy")
    from ccoverlap.lab.validate import validate

    seed = time.time_ns() % 2**32
    dev, rows = validate(kernels=12, shapes_per_kernel=12, seed=seed)
    bad = [r for r in rows if not r.match]
    print(f"seed {seed}: {len(rows)} footprints on {dev.name} (cupy {cupy.__version__})")
    assert len(rows) == 144 and not bad, bad[:5]


def test_nccl_footprint_is_read_from_the_installed_library():
    if not (find_libnccl() and find_cuobjdump()):
        pytest.skip("no libnccl or no cuobjdump on this machine")
    found = nccl_footprint("sm_90")
    assert found.sources["regs"].startswith("cuobjdump")
    assert 16 <= found.footprint.regs <= 255 and found.footprint.static_smem > 0
