import pytest

from ccoverlap import KernelFootprint, UsageError
from ccoverlap.gpu import cuda_driver as cu


def test_spec_with_aliases_and_kib():
    fp = KernelFootprint.from_spec("threads=640, regs=96, static=22592, dyn=80KiB, ctas=16, cluster=4, name=nccl")
    assert fp == KernelFootprint(640, 96, 22592, 81920, grid=16, cluster=4, name="nccl")


def test_spec_overrides_a_base():
    base = KernelFootprint(640, 96, 22592, 82240, grid=16, cluster=4)
    assert KernelFootprint.from_spec("threads=288", "comm", base=base).threads == 288
    assert KernelFootprint.from_spec("threads=288", "comm", base=base).regs == 96


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("threads=256", "regs= is required"),
        ("threads=256,regs=x", "regs='x' is not a whole number"),
        ("threads=256,regs=32,colour=red", "'colour=red' is not key=value with a key from"),
        ("threads256", "is not key=value"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, message):
    with pytest.raises(UsageError, match=message):
        KernelFootprint.from_spec(spec)


def test_validate_checks_cluster_against_device():
    with pytest.raises(UsageError, match=r"cluster=2 is out of range: valid 1..1"):
        KernelFootprint(128, 32, cluster=2).validate(__import__("ccoverlap").get_device("a100"))


def test_from_trace_event():
    event = {
        "ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn",
        "args": {"registers per thread": 122, "shared memory": 33280, "grid": [64, 8, 1], "block": [256, 1, 1],
                 "blocks per SM": 3.87},
    }
    fp = KernelFootprint.from_trace_event(event)
    assert fp == KernelFootprint(256, 122, 0, 33280, grid=512, name="ampere_sgemm_128x64_nn")


def test_from_trace_event_without_kernel_args():
    with pytest.raises(UsageError, match="lacks kernel args"):
        KernelFootprint.from_trace_event({"name": "cudaLaunchKernel", "args": {"correlation": 3}})


class FakeDriver:
    """Driver attributes of one function, and a record of which API was asked."""

    def __init__(self, attrs):
        self.attrs, self.calls = attrs, []

    def function_attribute(self, attr, handle):
        self.calls.append(("func", attr, handle))
        return self.attrs[attr]

    def kernel_attribute(self, attr, handle, device):
        self.calls.append(("kernel", attr, handle, device))
        return self.attrs[attr]


ATTRS = {cu.FUNC_NUM_REGS: 40, cu.FUNC_SHARED_SIZE_BYTES: 4096, cu.FUNC_REQUIRED_CLUSTER_WIDTH: 0}


def test_from_function_reads_cufunction_attributes():
    drv = FakeDriver(ATTRS)
    fp = KernelFootprint.from_function(0xABC, threads=128, dynamic_smem=512, grid=64, drv=drv)
    assert fp == KernelFootprint(128, 40, 4096, 512, grid=64, cluster=1)
    assert {c[0] for c in drv.calls} == {"func"} and all(c[2] == 0xABC for c in drv.calls)


def test_from_function_reads_cukernel_attributes_per_device():
    drv = FakeDriver(ATTRS | {cu.FUNC_REQUIRED_CLUSTER_WIDTH: 2})
    fp = KernelFootprint.from_function(0xDEF, threads=64, is_kernel=True, device=3, drv=drv)
    assert fp.cluster == 2 and fp.regs == 40
    assert {c[0] for c in drv.calls} == {"kernel"} and all(c[3] == 3 for c in drv.calls)
