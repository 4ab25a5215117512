"""Communicators and collectives through NCCL (torch.distributed's NCCL backend, at
the level of gpurt's C calls). Without NCCL every call raises NotSupportedError."""
from ._handle import Handle
from ._native import check, ffi, fetch, lib
from .kernels import _DTYPES
from .streams import current_stream

SUM, PROD, MAX, MIN, AVG = (lib.GPURT_REDUCE_SUM, lib.GPURT_REDUCE_PROD, lib.GPURT_REDUCE_MAX,
                            lib.GPURT_REDUCE_MIN, lib.GPURT_REDUCE_AVG)


def version():
    """NCCL's version code (major*10000 + minor*100 + patch)."""
    return fetch("int", lib.gpurt_comm_version)


def unique_id():
    """A new group's 128 bytes, for `Comm.init_rank` on every rank."""
    out = ffi.new("gpurt_comm_id_t*")
    check(lib.gpurt_comm_unique_id(out))
    return bytes(ffi.buffer(out.internal))


class Comm(Handle):
    """One rank of a group. `Comm.init_all(devices)` gives one per device (this
    process drives them all); `Comm.init_rank(id, nranks, rank, device)` joins a
    group of processes."""

    _destroy = "gpurt_comm_destroy"

    @classmethod
    def init_all(cls, devices):
        devices = list(devices)
        c_devices = ffi.new("int[]", devices)
        out = ffi.new("gpurt_comm_t[]", len(devices))
        check(lib.gpurt_comm_init_all(c_devices, len(devices), out))
        return [cls._adopt(out[i], owned=True) for i in range(len(devices))]

    @classmethod
    def init_rank(cls, id, nranks, rank, device=0, timeout_ms=None):
        c_id = ffi.new("gpurt_comm_id_t*")
        ffi.memmove(c_id.internal, bytes(id), 128)
        out = ffi.new("gpurt_comm_t*")
        if timeout_ms is None:
            check(lib.gpurt_comm_init_rank(c_id, nranks, rank, device, out))
        else:
            check(lib.gpurt_comm_init_rank_timeout(c_id, nranks, rank, device, int(timeout_ms), out))
        return cls._adopt(out[0], owned=True)

    def all_reduce(self, send, recv=None, op=SUM, dtype="float32", count=None, stream=None):
        """Reduces `send` (a DeviceBuffer) over all ranks with `op` into `recv`
        (default: in place): `count` elements of `dtype` (default: all of send), on
        `stream` (default: the current one)."""
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, not {dtype!r}")
        code, size = _DTYPES[dtype]
        recv = send if recv is None else recv
        count = send.nbytes // size if count is None else count
        stream = stream or current_stream()
        check(lib.gpurt_comm_all_reduce(ffi.cast("void*", int(send)), ffi.cast("void*", int(recv)), count,
                                        code, op, self._handle, stream.handle))

    def abort(self):
        """Cancels pending work and releases the communicator (after a peer failed)."""
        check(lib.gpurt_comm_abort(self._handle))
        self._handle = ffi.NULL
