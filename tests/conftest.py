import pytest


def pytest_collection_modifyitems(config, items):
    from ccoverlap import cuda_driver

    if cuda_driver.driver() is not None:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device: see docs/results.md)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
