"""Devices: counts, the current device, properties and peer access (torch.cuda's
device functions and cupy.cuda.Device)."""
from types import SimpleNamespace

from ._handle import ordinal
from ._native import check, fetch, ffi, lib


def is_available():
    """True where a driver and at least one device are present."""
    return bool(fetch("int", lib.gpurt_is_available))


def device_count():
    """The number of devices; 0 where there is no driver (as torch answers)."""
    return fetch("int", lib.gpurt_device_count)


def init():
    """Initialises the driver now instead of at first use."""
    check(lib.gpurt_init())


def is_initialized():
    return bool(fetch("int", lib.gpurt_is_initialized))


def driver_version():
    """The driver's CUDA version as an integer (13000 for 13.0)."""
    return fetch("int", lib.gpurt_driver_version)


def current_device():
    """This thread's current device (the one cudaGetDevice returns)."""
    return fetch("int", lib.gpurt_get_device)


def set_device(device):
    check(lib.gpurt_set_device(int(device)))


def synchronize(device=None):
    """Waits for all work on a device (default: the current one)."""
    check(lib.gpurt_device_synchronize(ordinal(device)))


class DeviceProperties(SimpleNamespace):
    """The fields of gpurt_device_properties_t, by name (`name`, `major`, `minor`,
    `total_memory`, `multiprocessor_count`, ...)."""


def _python_value(value, ctype):
    if ctype.kind == "array" and ctype.item.cname == "char":
        return ffi.string(value).decode("utf-8", "replace")
    if ctype.kind == "array" and ctype.item.cname == "uint8_t":
        return bytes(ffi.buffer(value))
    if ctype.kind == "array":
        return tuple(value)
    return value


def get_device_properties(device=None):
    props = ffi.new("gpurt_device_properties_t*")
    check(lib.gpurt_device_properties_init(props))
    check(lib.gpurt_device_get_properties(ordinal(device), props))
    fields = ffi.typeof("gpurt_device_properties_t").fields
    return DeviceProperties(**{name: _python_value(getattr(props, name), field.type)
                               for name, field in fields if name != "struct_size"})


def get_device_name(device=None):
    return get_device_properties(device).name


def get_device_capability(device=None):
    """(major, minor) compute capability."""
    props = get_device_properties(device)
    return props.major, props.minor


def mem_get_info(device=None):
    """(free, total) bytes of the device, as the driver reports them."""
    free, total = ffi.new("size_t*"), ffi.new("size_t*")
    check(lib.gpurt_mem_get_info(ordinal(device), free, total))
    return free[0], total[0]


def can_device_access_peer(device, peer):
    return bool(fetch("int", lib.gpurt_device_can_access_peer, int(device), int(peer)))


class Device:
    """A device: `with gpurt.Device(1):` makes it current for the block and restores
    the previous device after (cupy.cuda.Device); `Device()` is the current one."""

    def __init__(self, index=None):
        self.index = current_device() if index is None else int(index)
        self._previous = []

    def __int__(self):
        return self.index

    __index__ = __int__

    def __repr__(self):
        return f"gpurt.Device({self.index})"

    def __eq__(self, other):
        return isinstance(other, Device) and other.index == self.index

    def __hash__(self):
        return self.index

    def __enter__(self):
        self._previous.append(current_device())
        set_device(self.index)
        return self

    def __exit__(self, *exc):
        set_device(self._previous.pop())

    def use(self):
        """Makes this the thread's current device."""
        set_device(self.index)

    def synchronize(self):
        synchronize(self.index)

    @property
    def properties(self):
        return get_device_properties(self.index)

    @property
    def name(self):
        return self.properties.name

    @property
    def compute_capability(self):
        return get_device_capability(self.index)

    def mem_get_info(self):
        return mem_get_info(self.index)

    def can_access_peer(self, peer):
        return can_device_access_peer(self.index, int(peer))

    def enable_peer_access(self, peer):
        check(lib.gpurt_device_enable_peer_access(self.index, int(peer)))

    def disable_peer_access(self, peer):
        check(lib.gpurt_device_disable_peer_access(self.index, int(peer)))


def telemetry(device=None):
    """NVML's readings of a device as a namespace (memory_used/free/total bytes,
    gpu_utilization and memory_utilization %, temperature_c, power_draw_mw,
    power_limit_mw, sm_clock_mhz, memory_clock_mhz, clock_event_reasons); -1 where
    the GPU does not report one. NotSupportedError where NVML does not load."""
    t = ffi.new("gpurt_telemetry_t*", {"struct_size": ffi.sizeof("gpurt_telemetry_t")})
    check(lib.gpurt_device_telemetry(ordinal(device), t))
    return SimpleNamespace(**{name: getattr(t, name) for name, _ in ffi.typeof("gpurt_telemetry_t").fields if name != "struct_size"})


def utilization(device=None):
    """Percent of the last sample period a kernel ran (torch.cuda.utilization)."""
    return telemetry(device).gpu_utilization


def temperature(device=None):
    return telemetry(device).temperature_c


def power_draw(device=None):
    """Milliwatts (torch.cuda.power_draw)."""
    return telemetry(device).power_draw_mw


def clock_rate(device=None):
    """The SM clock in MHz (torch.cuda.clock_rate)."""
    return telemetry(device).sm_clock_mhz


def device_memory_used(device=None):
    """Bytes in use on the device by every process (torch.cuda.device_memory_used)."""
    return telemetry(device).memory_used


def list_gpu_processes(device=None):
    """[(pid, bytes)] of the compute processes on the device."""
    count = ffi.new("size_t*")
    check(lib.gpurt_device_processes(ordinal(device), ffi.NULL, 0, count))
    processes = ffi.new("gpurt_process_t[]", max(count[0], 1))
    check(lib.gpurt_device_processes(ordinal(device), processes, count[0], count))
    return [(processes[i].pid, processes[i].used_bytes) for i in range(min(count[0], len(processes)))]


def is_bf16_supported(device=None):
    """Whether the device computes in bfloat16 natively (torch.cuda.is_bf16_supported)."""
    return bool(fetch("int", lib.gpurt_device_bf16_supported, ordinal(device)))


def get_arch_list():
    """The architectures run-time compilation targets, as "sm_90" strings
    (torch.cuda.get_arch_list). NotSupportedError without NVRTC."""
    count = ffi.new("size_t*")
    check(lib.gpurt_arch_list(ffi.NULL, 0, count))
    archs = ffi.new("int[]", max(count[0], 1))
    check(lib.gpurt_arch_list(archs, count[0], count))
    return [f"sm_{archs[i]}" for i in range(count[0])]
