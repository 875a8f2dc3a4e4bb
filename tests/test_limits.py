import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from ccoverlap import UsageError, get_device
from ccoverlap.gpu import cuda_driver as cu
from ccoverlap.cli import main
from ccoverlap.model.limits import PRESET_NAMES, PRESETS, preset_for, read_live, read_live_rocm


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_are_self_consistent(name):
    d = PRESETS[name]
    assert d.name == name
    assert d.smem_per_block_optin + d.smem_reserved_per_block <= d.smem_per_sm
    assert d.regs_per_sm % (d.reg_subpartitions * d.reg_alloc_unit) == 0
    assert d.max_threads_per_sm % d.warp_size == 0 and d.max_threads_per_block <= d.max_threads_per_sm
    least, greatest = d.stream_priority_range
    assert greatest < least


def test_h200_preset_matches_measured_limits():
    d = get_device("H200")
    assert (d.sm_count, d.smem_per_sm, d.smem_per_block_optin, d.smem_reserved_per_block) == (132, 233472, 232448, 1024)
    assert ((d.max_threads_per_sm, d.regs_per_sm, d.max_blocks_per_sm, d.stream_priority_range)
            == (2048, 65536, 32, (0, -5)))


class FakeDriver:
    ATTRS = {
        cu.ATTR_COMPUTE_CAPABILITY_MAJOR: 9, cu.ATTR_COMPUTE_CAPABILITY_MINOR: 0,
        cu.ATTR_MULTIPROCESSOR_COUNT: 132, cu.ATTR_WARP_SIZE: 32, cu.ATTR_MAX_THREADS_PER_BLOCK: 1024,
        cu.ATTR_MAX_THREADS_PER_MULTIPROCESSOR: 2048, cu.ATTR_MAX_BLOCKS_PER_MULTIPROCESSOR: 32,
        cu.ATTR_MAX_REGISTERS_PER_MULTIPROCESSOR: 65536, cu.ATTR_MAX_REGISTERS_PER_BLOCK: 65536,
        cu.ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: 233472, cu.ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 232448,
        cu.ATTR_RESERVED_SHARED_MEMORY_PER_BLOCK: 1024, cu.ATTR_CLUSTER_LAUNCH: 1,
    }

    def __init__(self, major=9):
        self.attrs = self.ATTRS | {cu.ATTR_COMPUTE_CAPABILITY_MAJOR: major}

    def device_count(self):
        return 2

    def device(self, ordinal):
        return 100 + ordinal

    def device_attribute(self, attr, dev):
        assert dev == 101
        return self.attrs[attr]

    def device_name(self, dev):
        return "NVIDIA H200"

    def driver_version(self):
        return 13000

    def stream_priority_range(self, dev):
        return (0, -5)


def test_read_live_from_driver_equals_h200_preset_in_every_limit():
    live = read_live(1, drv=FakeDriver())
    preset = PRESETS["h200"]
    for field in preset.__dataclass_fields__:
        if field not in ("name", "source"):
            assert getattr(live, field) == getattr(preset, field), field
    assert live.name == "NVIDIA H200" and live.source.startswith("live: CUDA driver 13000, device 1")


def test_read_live_rejects_missing_device_and_old_gpus():
    with pytest.raises(UsageError, match=r"cuda:5 does not exist: valid cuda:0..cuda:1"):
        read_live(5, drv=FakeDriver())
    with pytest.raises(UsageError, match="compute capability 7.x is not supported"):
        read_live(1, drv=FakeDriver(major=7))


def test_rocm_properties_fill_the_gfx90a_rules():
    props = SimpleNamespace(name="AMD Instinct MI250X", multi_processor_count=110, warp_size=64,
                            max_threads_per_multi_processor=2048, gcnArchName="gfx90a:sramecc+:xnack-")
    d = read_live_rocm(props)
    assert d.vendor == "amd" and d.sm_count == 110 and d.reg_alloc_unit == 512 and "gfx90a" in d.source


@pytest.mark.parametrize("bad", ["cuda:x", "v100", ""])
def test_bad_device_names(bad, monkeypatch):
    monkeypatch.setattr(cu, "driver", lambda: None)
    with pytest.raises(UsageError):
        get_device(bad)


def test_arch_names_the_cuda_target():
    assert get_device("h200").arch == "sm_90" and get_device("a40").arch == "sm_86"


def test_h200_is_the_h100_under_another_name():
    assert PRESETS["h200"] == dataclasses.replace(PRESETS["h100"], name="h200")
    assert PRESET_NAMES == ("a40", "a100", "h100", "h200", "mi250x")


@pytest.mark.parametrize(("cc", "name"), [((9, 0), "h100"), ((8, 0), "a100"), ((8, 6), "a40"), ((7, 0), None),
                                         ((None, None), None)])
def test_a_compute_capability_stands_for_the_first_nvidia_preset_of_it(cc, name):
    found = preset_for(cc)
    assert (found.name if found else None) == name


def test_an_amd_compute_capability_is_looked_up_among_amd_presets():
    assert preset_for((9, 0), vendor="amd").name == "mi250x"  # 9.0 is gfx90a's number too


@pytest.mark.parametrize("command", ["plan", "occupancy", "info"])
def test_device_help_names_every_preset(command, capsys):
    """The help is made from the presets' list (model/limits.PRESET_NAMES, read when the options' config is
    defined), so a preset added there is in every --device help."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"--device DEVICE preset ({', '.join(PRESET_NAMES)}) or cuda" in help_text


def test_the_docs_list_every_preset():
    root = Path(__file__).parents[1]
    readme = re.search(r"or a preset \(([^)]*)\)", (root / "README.md").read_text()).group(1)
    occupancy_md = re.search(r"## Presets\n\n(.*?) \(one GCD\)", (root / "docs/occupancy.md").read_text()).group(1)
    assert re.findall(r"`(\w+)`", readme) == re.findall(r"`(\w+)`", occupancy_md) == list(PRESET_NAMES)
