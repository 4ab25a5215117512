"""What holds on every machine: the package loads, matches its header, and maps
statuses to exceptions; without a driver, it answers as torch does."""
import re

import pytest

import gpurt
from gpurt import _native
from gpurt.errors import _BY_NAME


def test_every_c_function_is_callable_from_python():
    header = open(_native.header_path).read()
    functions = set(re.findall(r"^\S.*?\b(gpurt_\w+)\(", header, re.M))
    assert len(functions) > 120
    missing = [name for name in sorted(functions) if not hasattr(_native.lib, name)]
    assert not missing


def test_version_matches_the_header():
    lib = _native.lib
    expected = lib.GPURT_VERSION_MAJOR * 10000 + lib.GPURT_VERSION_MINOR * 100 + lib.GPURT_VERSION_PATCH
    assert gpurt.version() == expected
    assert gpurt.__version__ == f"{lib.GPURT_VERSION_MAJOR}.{lib.GPURT_VERSION_MINOR}.{lib.GPURT_VERSION_PATCH}"


def test_integer_macros_reach_python():
    assert _native.lib.GPURT_CURRENT_DEVICE == -1
    assert _native.lib.GPURT_MAX_ALLOCATION_SIZE == 1 << 48


def test_each_exception_class_names_a_real_status():
    statuses = _native.ffi.typeof("gpurt_status_t").relements
    for name, cls in _BY_NAME.items():
        assert name in statuses, name
        assert issubclass(cls, gpurt.Error)
    assert issubclass(gpurt.OutOfMemoryError, MemoryError)
    assert issubclass(gpurt.InvalidArgumentError, ValueError)


def test_a_failed_call_raises_with_the_c_message():
    with pytest.raises(gpurt.InvalidArgumentError) as raised:
        gpurt.set_allocator_config("max_split_size_mb:not-a-number")
    error = raised.value
    assert error.status == _native.lib.GPURT_ERROR_INVALID_ARGUMENT
    assert error.name == "GPURT_ERROR_INVALID_ARGUMENT"
    assert "max_split_size_mb" in error.message and error.message in str(error)


def test_sync_debug_mode_round_trips():
    before = gpurt.get_sync_debug_mode()
    try:
        gpurt.set_sync_debug_mode("warn")
        assert gpurt.get_sync_debug_mode() == 1
        with pytest.raises(gpurt.InvalidArgumentError):
            gpurt.set_sync_debug_mode(7)
        assert gpurt.get_sync_debug_mode() == 1
    finally:
        gpurt.set_sync_debug_mode(before)


def test_python_side_arguments_are_checked():
    with pytest.raises(TypeError):
        with gpurt.stream(5):
            pass
    with pytest.raises(ValueError):
        gpurt.elementwise("out = a", {}, 0, dtype="complex64")
    with pytest.raises(TypeError):
        gpurt.DeviceBuffer()
    with pytest.raises(ValueError):
        gpurt.Event.from_ipc_handle(b"short")
    with gpurt.stream(None) as s:
        assert s is None


def test_without_a_driver_there_are_no_devices(no_driver):
    assert gpurt.device_count() == 0
    assert not gpurt.is_available()


@pytest.mark.parametrize("make", [gpurt.Stream, gpurt.Event, lambda: gpurt.DeviceBuffer(16), gpurt.memory_stats,
                                  gpurt.current_device, gpurt.mem_get_info, gpurt.synchronize, gpurt.GraphPool,
                                  gpurt.MemPool, gpurt.MemPool.default, lambda: gpurt.ManagedBuffer(16)])
def test_without_a_driver_device_calls_raise_no_driver(no_driver, make):
    with pytest.raises(gpurt.NoDriverError) as raised:
        make()
    assert "libcuda" in str(raised.value)


def test_nvtx_calls_need_no_device():
    """torch.cuda.nvtx's calls: with no tool attached, pushes report -2 (NVTX's
    'not tracked') and everything succeeds, with or without a driver."""
    from gpurt import nvtx
    nvtx.mark("hello")
    assert nvtx.range_push("outer") == -2
    assert nvtx.range_pop() == -2
    with nvtx.range("block"):
        pass
    nvtx.range_end(nvtx.range_start("across threads"))
