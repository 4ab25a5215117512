"""Which driver the tests run on decides what they check:
- none: no libcuda (CI): the no-driver answers; device tests report themselves skipped;
- stub: tests/stub-driver (CI): every call on the device-present paths, no data moves;
- gpu: a real device (the GPU suite): interop and exact data checks as well.
GPURT_REQUIRE_GPU=1 turns the skips of the GPU tests into failures."""
import os

import pytest

import gpurt


def driver_kind():
    if gpurt.device_count() == 0:
        return "none"
    return "stub" if gpurt.get_device_name(0) == "Fake GPU" else "gpu"


DRIVER = driver_kind()


def _skip_unless(wanted, reason):
    if DRIVER in wanted:
        return
    if os.environ.get("GPURT_REQUIRE_GPU") == "1" and "gpu" in wanted:
        pytest.fail(f"GPURT_REQUIRE_GPU=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture
def device():
    """A device is present (the stand-in driver or a GPU)."""
    _skip_unless(("stub", "gpu"), "no CUDA driver on this machine (the stand-in driver or a GPU runs this test)")
    return gpurt.Device(0)


@pytest.fixture
def gpu():
    """A real GPU: data moves, kernels run."""
    _skip_unless(("gpu",), f"needs a GPU (driver here: {DRIVER}); the GPU suite runs it")
    return gpurt.Device(0)


@pytest.fixture
def no_driver():
    _skip_unless(("none",), f"checks the answers without a driver; this machine has one ({DRIVER})")
