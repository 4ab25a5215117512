"""The stream sanitizer (torch.cuda._sanitizer): reports work on two streams that
touches the same bytes with nothing ordering them. Off by default."""
from ._native import check, ffi, fetch, lib

READ, WRITE = lib.GPURT_ACCESS_READ, lib.GPURT_ACCESS_WRITE


def enable(on=True):
    """Turns the sanitizer on (or off: what it tracked is forgotten)."""
    check(lib.gpurt_sanitizer_enable(1 if on else 0))


def access(buffer, nbytes, kind, stream, tag=None):
    """Declares that work queued on `stream` reads (`READ`) or writes (`WRITE`)
    `nbytes` at `buffer` (a DeviceBuffer or an address)."""
    c_tag = ffi.NULL if tag is None else tag.encode()
    check(lib.gpurt_sanitizer_access(ffi.cast("void*", int(buffer)), nbytes, kind, stream.handle, c_tag))


def report_count():
    """Races and unsafe frees reported since the process started."""
    return fetch("uint64_t", lib.gpurt_sanitizer_report_count)
