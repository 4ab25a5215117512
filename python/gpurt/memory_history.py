"""The allocator's memory history and snapshots (torch.cuda.memory's
_record_memory_history, _snapshot and _dump_snapshot), and annotations that tag
what a block of code allocates."""
import contextlib
import pickle

from ._handle import ordinal
from ._native import check, ffi, lib

_FORMATS = {"json": lib.GPURT_SNAPSHOT_JSON, "pickle": lib.GPURT_SNAPSHOT_PICKLE, "html": lib.GPURT_SNAPSHOT_HTML}


def record_memory_history(enabled=True, max_entries=0, stacks=False, clear=False):
    """Starts (or, with enabled=False, stops) recording every device's allocator
    events, keeping the newest max_entries per device (0: 10 000); stacks=True keeps
    each event's native stack; clear=True forgets the events so far."""
    flags = (lib.GPURT_HISTORY_STACKS if stacks else 0) | (lib.GPURT_HISTORY_CLEAR if clear else 0)
    check(lib.gpurt_memory_record_history(1 if enabled else 0, max_entries, flags))


@contextlib.contextmanager
def annotate(name):
    """Tags the history events of what this thread allocates inside the block with
    `name` (nested names join as "outer > inner")."""
    check(lib.gpurt_memory_annotate_push(str(name).encode()))
    try:
        yield
    finally:
        check(lib.gpurt_memory_annotate_pop())


def _snapshot_bytes(device, fmt):
    code, size = _FORMATS[fmt], ffi.new("size_t*")
    while True:
        status = lib.gpurt_memory_snapshot_buffer(ordinal(device), code, ffi.NULL, 0, size)
        if status != lib.GPURT_ERROR_INVALID_ARGUMENT or size[0] == 0:
            check(status)
        # Room for the events recorded between the two calls.
        buffer = ffi.new("char[]", size[0] + 65536)
        if lib.gpurt_memory_snapshot_buffer(ordinal(device), code, buffer, len(buffer), size) == lib.GPURT_SUCCESS:
            return ffi.unpack(buffer, size[0])


def memory_snapshot(device=None):
    """The snapshot of a device's memory as torch.cuda.memory._snapshot() gives it:
    {"segments": [...], "device_traces": [...], ...}."""
    return pickle.loads(_snapshot_bytes(device, "pickle"))


def dump_snapshot(path, device=None, format="pickle"):
    """Writes the snapshot to `path` as "pickle" (PyTorch's tools read it), "json",
    or "html" (a page that draws it, no network needed)."""
    if format not in _FORMATS:
        raise ValueError(f"format {format!r}: give one of {sorted(_FORMATS)}")
    check(lib.gpurt_memory_snapshot(ordinal(device), _FORMATS[format], str(path).encode()))
