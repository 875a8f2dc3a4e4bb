"""The suite's fixtures. GPU tests that start NCCL take NVLink multicast as the environment they run in has it:
the device scripts switch it off on the shared machines (bench/device/prologue.sh exports NCCL_NVLS_ENABLE=0 and
the like); ccoverlap itself never sets a variable nobody asked for."""
import signal

import pytest

#: the modules that take most of the suite's time (fresh processes importing torch: tuner trials, bench process
#: sets, the doctor's runs), longest first: they start first, so none of them starts last and keeps the run long
HEAVY = ("test_multinode.py", "test_tune_cli.py", "test_bench.py", "test_bench_hardening.py", "test_doctor.py",
         "test_tune.py", "test_run_strategy.py", "test_workloads.py", "test_faults.py")


def pytest_configure(config):
    """Under -n, whole modules go to the workers (their module-scoped runs made once), heaviest first, as
    collected: xdist's default (`load`) splits a module across workers, each making its module fixtures again,
    and ran the heavy modules last. An explicit --dist is the user's."""
    if config.getoption("dist", "no") == "load" and not any(
            a.startswith("--dist") or a == "-d" for a in config.invocation_params.args):
        config.option.dist = "loadfile"
        config.option.loadscopereorder = False  # the collection's order, not the most tests first


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: HEAVY.index(item.path.name) if item.path.name in HEAVY else len(HEAVY))
    from ccoverlap.gpu import cuda_driver

    if cuda_driver.driver() is not None:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device: see docs/results.md)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """NVRTC and cuobjdump results are cached on disk: keep the tests' cache to themselves."""
    import os

    os.environ["CCOVERLAP_CACHE"] = str(tmp_path_factory.mktemp("ccoverlap-cache"))


@pytest.fixture(scope="session")
def fake(tmp_path_factory):
    """The fake CUDA and HIP drivers and their launcher (tests/fake_gpu), built once a session."""
    from fake_gpu.build import build

    d = tmp_path_factory.mktemp("fake_gpu")
    try:
        build(d)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return d


@pytest.fixture
def full_disk(monkeypatch):
    """`full_disk(folder)`: every file util/output writes under `folder` fills the disk after its first byte
    (ENOSPC), as a disk all but full; files elsewhere (the ranks', pytest's) are written as usual."""
    import errno
    import os

    from ccoverlap.util import output

    real = os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            self.f.write(data[:1])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fill(folder):
        def fdopen(fd, *a, **k):
            f = real(fd, *a, **k)
            return Full(f) if os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder)) else f

        monkeypatch.setattr(output.os, "fdopen", fdopen)
        return lambda: monkeypatch.setattr(output.os, "fdopen", real)  # the disk has room again

    return fill


@pytest.fixture
def no_hang():
    """A test that would hang (a FIFO opened for reading) fails after 20 s instead."""
    def alarm(*_):
        raise TimeoutError("hung")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
