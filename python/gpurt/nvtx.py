"""NVTX marks and ranges (torch.cuda.nvtx): Nsight tools, or any tool that
NVTX_INJECTION64_PATH names, see them; with none attached they cost a few ns."""
import contextlib

from ._native import check, ffi, lib


def mark(msg):
    check(lib.gpurt_nvtx_mark(str(msg).encode()))


def range_push(msg):
    """Opens a range on this thread: its depth, or -2 when no tool tracks ranges."""
    depth = ffi.new("int*")
    check(lib.gpurt_nvtx_range_push(str(msg).encode(), depth))
    return depth[0]


def range_pop():
    depth = ffi.new("int*")
    check(lib.gpurt_nvtx_range_pop(depth))
    return depth[0]


def range_start(msg):
    """Opens a range any thread may end: its id, for range_end."""
    rid = ffi.new("uint64_t*")
    check(lib.gpurt_nvtx_range_start(str(msg).encode(), rid))
    return rid[0]


def range_end(range_id):
    check(lib.gpurt_nvtx_range_end(range_id))


@contextlib.contextmanager
def range(msg):
    """A push/pop range around a block (torch.cuda.nvtx.range)."""
    range_push(msg)
    try:
        yield
    finally:
        range_pop()
