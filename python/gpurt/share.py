"""Processes that share one GPU (gpurt_share_join): an allocation the device refuses asks
the group's other members for their cached memory before it fails."""
from ._handle import ordinal
from ._native import check, ffi, lib

_OFFERS = {"cached": lib.GPURT_SHARE_OFFER_CACHED, "never": lib.GPURT_SHARE_OFFER_NEVER}


def join(name, device=None, offer="cached", deadline_ms=0):
    """Joins share group `name` for `device`: `offer` "cached" (the others may ask this
    process to empty its caches on the device) or "never"; an allocation the device
    refuses waits `deadline_ms` at most for the others (0: 3 000)."""
    if offer not in _OFFERS:
        raise ValueError(f"offer {offer!r}: 'cached' or 'never'")
    options = ffi.new("gpurt_share_options_t*")
    options.struct_size = ffi.sizeof("gpurt_share_options_t")
    options.offer = _OFFERS[offer]
    options.deadline_ms = int(deadline_ms)
    check(lib.gpurt_share_join(ordinal(device), name.encode(), options))


def leave(device=None):
    """Leaves the share group `device` is in."""
    check(lib.gpurt_share_leave(ordinal(device)))
