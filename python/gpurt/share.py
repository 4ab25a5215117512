"""Processes that share one GPU (gpurt_share_join): an allocation the device refuses asks
the group's other members for their cached memory, then for their idle pools put to
sleep, before it fails."""
from ._handle import ordinal
from ._native import check, ffi, lib

_OFFERS = {
    "cached": lib.GPURT_SHARE_OFFER_CACHED,
    "never": lib.GPURT_SHARE_OFFER_NEVER,
    "sleep-discard": lib.GPURT_SHARE_OFFER_SLEEP_DISCARD,
    "sleep-offload": lib.GPURT_SHARE_OFFER_SLEEP_OFFLOAD,
}


def join(name, device=None, offer="cached", deadline_ms=0, idle_ms=0, headroom_mib=0):
    """Joins share group `name` for `device`. `offer`: "cached" (the others may ask this
    process to empty its caches on the device), "sleep-discard" or "sleep-offload" (then
    also to put its pools on the device that had no allocation or free for `idle_ms`
    to sleep, their contents dropped or kept in host memory; such a pool wakes at its
    next allocation, its `MemPool.touch()` or `MemPool.wake()`; 0: 1 000 ms), or
    "never". Work that allocates nothing from a pool (a CUDA graph's replay, kernels on
    tensors made before) calls that pool's `touch()` first. An allocation the device
    refuses waits `deadline_ms` at most for the others (0: 3 000), and asks them to
    leave `headroom_mib` free beside it (0: 256), for memory this process takes outside
    gpurt (kernels loaded at their first launch)."""
    if offer not in _OFFERS:
        raise ValueError(f"offer {offer!r}: one of {', '.join(map(repr, _OFFERS))}")
    options = ffi.new("gpurt_share_options_t*")
    options.struct_size = ffi.sizeof("gpurt_share_options_t")
    options.offer = _OFFERS[offer]
    options.deadline_ms = int(deadline_ms)
    options.idle_ms = int(idle_ms)
    options.headroom_mib = int(headroom_mib)
    check(lib.gpurt_share_join(ordinal(device), name.encode(), options))


def offer_pool(pool, offer, idle_ms=0):
    """What the group may take from one `MemPool` (one of gpurt's, or `MemPool.default()`),
    in place of its device's offer: one of the offers of `join`; `idle_ms` for the
    "sleep-*" offers (0: the device's). The pool's device must be in a group."""
    if offer not in _OFFERS:
        raise ValueError(f"offer {offer!r}: one of {', '.join(map(repr, _OFFERS))}")
    check(lib.gpurt_share_pool_offer(pool._handle, _OFFERS[offer], int(idle_ms)))


def leave(device=None):
    """Leaves the share group `device` is in."""
    check(lib.gpurt_share_leave(ordinal(device)))
