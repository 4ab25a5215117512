"""Streams and events (torch.cuda.Stream / Event, cupy.cuda.Stream / Event)."""
from contextlib import contextmanager

from ._handle import Handle, address, ordinal
from ._native import check, fetch, ffi, lib, ready


class Stream(Handle):
    """A CUDA stream. `Stream()` creates one on the current device, `Stream(device)`
    on another; non-blocking (not ordered with the legacy default stream) unless
    `non_blocking=False`; `priority` as in `priority_range()` (lower is higher).

    `with stream:` makes it current for the block (as `with gpurt.stream(s):`).
    `__cuda_stream__()` lets CUDA Python libraries use it directly."""

    _destroy = "gpurt_stream_destroy"

    def __init__(self, device=None, priority=0, non_blocking=True):
        flags = lib.GPURT_STREAM_NON_BLOCKING if non_blocking else 0
        super().__init__(fetch("gpurt_stream_t", lib.gpurt_stream_create, ordinal(device), flags, int(priority)))

    def __repr__(self):
        return f"<gpurt.Stream device={self.device} native={self.native:#x}>" if self._handle != ffi.NULL \
            else "<gpurt.Stream closed>"

    @property
    def native(self):
        """The CUstream / cudaStream_t as an int (0 for the legacy default stream)."""
        return address(fetch("void*", lib.gpurt_stream_native, self._handle))

    cuda_stream = native  # torch's name

    def __cuda_stream__(self):
        """The CUDA stream protocol: (version, address)."""
        return (0, self.native)

    @property
    def device(self):
        return fetch("int", lib.gpurt_stream_get_device, self._handle)

    @property
    def priority(self):
        return fetch("int", lib.gpurt_stream_get_priority, self._handle)

    @property
    def non_blocking(self):
        return bool(fetch("unsigned int", lib.gpurt_stream_get_flags, self._handle) & lib.GPURT_STREAM_NON_BLOCKING)

    @property
    def id(self):
        """The driver's unique id of the stream."""
        return fetch("uint64_t", lib.gpurt_stream_get_id, self._handle)

    def query(self):
        """True when all work queued so far has finished."""
        return ready(lib.gpurt_stream_query(self._handle))

    def synchronize(self):
        check(lib.gpurt_stream_synchronize(self._handle))

    def wait_event(self, event):
        """Later work on this stream waits for `event`'s recorded work."""
        check(lib.gpurt_stream_wait_event(self._handle, _event(event)._handle))

    def wait_stream(self, stream):
        """Later work on this stream waits for the work queued on `stream` so far."""
        check(lib.gpurt_stream_wait_stream(self._handle, _stream(stream)._handle))

    def record_event(self, event=None):
        """Records `event` (a new timing-free one if None) on this stream; returns it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def is_capturing(self):
        return bool(fetch("int", lib.gpurt_stream_is_capturing, self._handle))

    def use(self):
        """Makes this the current stream of its device for this thread."""
        check(lib.gpurt_set_stream(self._handle))

    def __enter__(self):
        check(lib.gpurt_stream_push(self._handle))
        return self

    def __exit__(self, *exc):
        check(lib.gpurt_stream_pop())


class GreenContext(Handle):
    """A share of a device's SMs with streams of its own (torch.cuda.green_contexts):
    work on `ctx.stream()` runs on those SMs only. `GreenContext(num_sms, device)` has
    at least `num_sms` (rounded up to the driver's granularity, 8 on Hopper);
    `GreenContext.split([16, 0], device)` makes disjoint ones (a last 0: every SM
    left). Close its streams before it."""

    _destroy = "gpurt_green_context_destroy"

    def __init__(self, num_sms, device=None):
        super().__init__(fetch("gpurt_green_context_t", lib.gpurt_green_context_create, ordinal(device), int(num_sms)))

    @classmethod
    def split(cls, sm_counts, device=None):
        counts = ffi.new("unsigned int[]", [int(c) for c in sm_counts])
        out = ffi.new("gpurt_green_context_t[]", max(len(counts), 1))
        check(lib.gpurt_green_context_split(ordinal(device), counts, len(counts), out))
        return [cls._adopt(out[i], owned=True) for i in range(len(counts))]

    @property
    def sm_count(self):
        return fetch("unsigned int", lib.gpurt_green_context_sm_count, self._handle)

    def stream(self, priority=0):
        """A new (non-blocking) stream on the green context's SMs."""
        handle = fetch("gpurt_stream_t", lib.gpurt_green_context_stream_create, self._handle, lib.GPURT_STREAM_NON_BLOCKING,
                       int(priority))
        return Stream._adopt(handle, owned=True)


def ExternalStream(native, device=None):
    """Wraps a stream made elsewhere (a cudaStream_t as an int, or an object with
    `__cuda_stream__`); gpurt never destroys it."""
    if hasattr(native, "__cuda_stream__"):
        native = native.__cuda_stream__()[1]
    handle = fetch("gpurt_stream_t", lib.gpurt_stream_wrap, ordinal(device), ffi.cast("void*", int(native)))
    return Stream._adopt(handle, owned=True)  # destroying it releases the handle, never the stream


def _stream(stream):
    if not isinstance(stream, Stream):
        raise TypeError(f"expected a gpurt.Stream, got {type(stream).__name__}")
    return stream


def current_stream(device=None):
    """This thread's current stream of a device (its legacy default stream unless
    one was set or pushed)."""
    return Stream._adopt(fetch("gpurt_stream_t", lib.gpurt_current_stream, ordinal(device)), owned=False)


def default_stream(device=None):
    """The legacy default stream (cudaStreamLegacy)."""
    return Stream._adopt(fetch("gpurt_stream_t", lib.gpurt_stream_default, ordinal(device)), owned=False)


def per_thread_default_stream(device=None):
    return Stream._adopt(fetch("gpurt_stream_t", lib.gpurt_stream_per_thread, ordinal(device)), owned=False)


def stream_from_pool(device=None, high_priority=False):
    """A stream from the device's pool (32 per priority, round-robin, as torch's
    `Stream()`); gpurt keeps it, there is nothing to destroy."""
    return Stream._adopt(fetch("gpurt_stream_t", lib.gpurt_stream_from_pool, ordinal(device), int(high_priority)), owned=False)


def priority_range(device=None):
    """(least, greatest) stream priority: the default and the highest."""
    least, greatest = ffi.new("int*"), ffi.new("int*")
    check(lib.gpurt_stream_priority_range(ordinal(device), least, greatest))
    return least[0], greatest[0]


def set_stream(stream):
    check(lib.gpurt_set_stream(_stream(stream)._handle))


@contextmanager
def stream(s):
    """`with gpurt.stream(s):` makes `s` current on its device for the block; None
    does nothing (as torch.cuda.stream)."""
    if s is None:
        yield None
        return
    with _stream(s):
        yield s


class Event(Handle):
    """A CUDA event. `enable_timing` for `elapsed_time`, `blocking` to sleep rather
    than spin in `synchronize`, `interprocess` for `ipc_handle`, `external` to be an
    event-record or event-wait node when recorded or waited on in a capture
    (torch.cuda.Event(external=True))."""

    _destroy = "gpurt_event_destroy"

    def __init__(self, enable_timing=False, blocking=False, interprocess=False, device=None, external=False):
        flags = (0 if enable_timing else lib.GPURT_EVENT_DISABLE_TIMING) \
            | (lib.GPURT_EVENT_BLOCKING_SYNC if blocking else 0) \
            | (lib.GPURT_EVENT_INTERPROCESS if interprocess else 0) \
            | (lib.GPURT_EVENT_EXTERNAL if external else 0)
        super().__init__(fetch("gpurt_event_t", lib.gpurt_event_create, ordinal(device), flags))

    @classmethod
    def from_ipc_handle(cls, ipc_handle, device=None):
        """Opens an event another process shared with `ipc_handle()`."""
        ipc = ffi.new("gpurt_ipc_event_handle_t*")
        if len(ipc_handle) != ffi.sizeof(ipc[0]):
            raise ValueError(f"an IPC event handle has {ffi.sizeof(ipc[0])} bytes, not {len(ipc_handle)}")
        ffi.memmove(ipc.reserved, ipc_handle, len(ipc_handle))
        return cls._adopt(fetch("gpurt_event_t", lib.gpurt_event_open_ipc, ordinal(device), ipc), owned=True)

    def record(self, stream=None):
        """Records the work queued so far on `stream` (default: the current stream)."""
        if stream is None:
            check(lib.gpurt_event_record_current(self._handle))
        else:
            check(lib.gpurt_event_record(self._handle, _stream(stream)._handle))

    def wait(self, stream=None):
        """Makes `stream` (default: the current stream) wait for this event."""
        (current_stream() if stream is None else _stream(stream)).wait_event(self)

    def query(self):
        """True when the recorded work has finished (or nothing was recorded)."""
        return ready(lib.gpurt_event_query(self._handle))

    def synchronize(self):
        check(lib.gpurt_event_synchronize(self._handle))

    def elapsed_time(self, end):
        """Milliseconds between this event and `end`, both recorded and timing-enabled."""
        return fetch("float", lib.gpurt_event_elapsed_time, self._handle, _event(end)._handle)

    def ipc_handle(self):
        """Bytes another process passes to `Event.from_ipc_handle` (interprocess events)."""
        ipc = ffi.new("gpurt_ipc_event_handle_t*")
        check(lib.gpurt_event_ipc_handle(self._handle, ipc))
        return bytes(ffi.buffer(ipc))

    @property
    def device(self):
        return fetch("int", lib.gpurt_event_get_device, self._handle)

    @property
    def native(self):
        """The CUevent / cudaEvent_t as an int."""
        return address(fetch("void*", lib.gpurt_event_native, self._handle))


def _event(event):
    if not isinstance(event, Event):
        raise TypeError(f"expected a gpurt.Event, got {type(event).__name__}")
    return event
