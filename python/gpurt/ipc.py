"""IPC memory: device buffers shared with other processes of this machine (torch's
share_memory_ of CUDA tensors and torch.cuda.ipc_collect, cupy's ipcGetMemHandle)."""
from ._native import check, fetch, ffi, lib
from .memory import DeviceBuffer


class IpcBuffer(DeviceBuffer):
    """A block another process exported (`ipc_handle`), opened in this one: a
    DeviceBuffer of `nbytes` (or `shape` and `dtype`), which the other process says,
    used on `stream`. Closed (the producer may then reuse it) when the object is,
    or by `free()`."""

    _destroy = "gpurt_ipc_close_mem_handle"

    def __init__(self, handle, nbytes=None, *, shape=None, dtype="uint8", stream=None, device=None):
        handle = bytes(handle)
        if len(handle) != lib.GPURT_IPC_HANDLE_SIZE:
            raise ValueError(f"an IPC handle has {lib.GPURT_IPC_HANDLE_SIZE} bytes, not {len(handle)}")
        self._describe(nbytes, shape, dtype, stream, device)
        c_handle = ffi.new("gpurt_ipc_mem_handle_t*")
        ffi.memmove(c_handle.bytes, handle, len(handle))
        self._handle = fetch("void*", lib.gpurt_ipc_open_mem_handle, c_handle)


def ipc_collect():
    """Frees the exported blocks this process freed whose other processes have all
    closed them or exited."""
    check(lib.gpurt_ipc_collect())


def ipc_kept():
    """(blocks, bytes): what this process freed that other processes still hold."""
    blocks, nbytes = ffi.new("uint64_t*"), ffi.new("uint64_t*")
    check(lib.gpurt_ipc_kept(blocks, nbytes))
    return blocks[0], nbytes[0]
