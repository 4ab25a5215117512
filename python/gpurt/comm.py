"""Communicators and collectives through NCCL (torch.distributed's NCCL backend, at
the level of gpurt's C calls). Without NCCL every call raises NotSupportedError."""
from ._handle import Handle
from ._native import check, ffi, fetch, lib
from .kernels import _DTYPES
from .memory import DeviceBuffer
from .streams import current_stream

SUM, PROD, MAX, MIN, AVG = (lib.GPURT_REDUCE_SUM, lib.GPURT_REDUCE_PROD, lib.GPURT_REDUCE_MAX,
                            lib.GPURT_REDUCE_MIN, lib.GPURT_REDUCE_AVG)
NOCOLOR = lib.GPURT_COMM_SPLIT_NOCOLOR


def group_start():
    """Starts a group: the collectives until `group_end` are launched together
    (one thread driving several ranks, or sends and receives that pair up)."""
    check(lib.gpurt_comm_group_start())


def group_end():
    check(lib.gpurt_comm_group_end())


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

    def split(self, color, key=0):
        """A new communicator of the ranks that give the same `color` (torch's
        `new_group`), ranked by `key`; None for `NOCOLOR`. Every rank of this one
        calls it (one per process; `Comm.split_all` for several in one process)."""
        return Comm.split_all([self], [color], [key])[0]

    @classmethod
    def split_all(cls, comms, colors, keys=None):
        """Splits several ranks of one communicator that this process drives."""
        comms, colors = list(comms), list(colors)
        keys = [0] * len(comms) if keys is None else list(keys)
        out = ffi.new("gpurt_comm_t[]", len(comms))
        check(lib.gpurt_comm_split_all(ffi.new("gpurt_comm_t[]", [c._handle for c in comms]), len(comms),
                                       ffi.new("int[]", colors), ffi.new("int[]", keys), out))
        return [None if out[i] == ffi.NULL else cls._adopt(out[i], owned=True) for i in range(len(comms))]

    def _args(self, send, recv, dtype, count, stream, divide=1):
        """(send, recv, count, dtype code, stream) for a C collective: `count`
        elements of `dtype` (default: send's size over `divide`), recv default send."""
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, not {dtype!r}")
        code, size = _DTYPES[dtype]
        recv = send if recv is None else recv
        count = send.nbytes // size // divide if count is None else count
        stream = stream or current_stream()
        return ffi.cast("void*", int(send)), ffi.cast("void*", int(recv)), count, code, stream.handle

    def all_reduce(self, send, recv=None, op=SUM, dtype="float32", count=None, stream=None):
        """Reduces `send` (a DeviceBuffer) over all ranks with `op` into `recv`
        (default: in place): `count` elements of `dtype` (default: all of send), on
        `stream` (default: the current one)."""
        s, r, n, code, st = self._args(send, recv, dtype, count, stream)
        check(lib.gpurt_comm_all_reduce(s, r, n, code, op, self._handle, st))

    def bcast(self, send, recv=None, root=0, dtype="float32", count=None, stream=None):
        """Rank `root`'s `send` into every rank's `recv` (NCCL's broadcast)."""
        s, r, n, code, st = self._args(send, recv, dtype, count, stream)
        check(lib.gpurt_comm_bcast(s, r, n, code, root, self._handle, st))

    def reduce(self, send, recv=None, op=SUM, root=0, dtype="float32", count=None, stream=None):
        """The reduction of every rank's `send` into rank `root`'s `recv`."""
        s, r, n, code, st = self._args(send, recv, dtype, count, stream)
        check(lib.gpurt_comm_reduce(s, r, n, code, op, root, self._handle, st))

    def all_gather(self, send, recv, dtype="float32", count=None, stream=None):
        """Every rank's `send` (`count` elements each) one after the other in `recv`."""
        s, r, n, code, st = self._args(send, recv, dtype, count, stream)
        check(lib.gpurt_comm_all_gather(s, r, n, code, self._handle, st))

    def reduce_scatter(self, send, recv, op=SUM, dtype="float32", count=None, stream=None):
        """The reduction of `send` over the ranks, rank i getting block i (`count`
        elements: default, send's size over the number of ranks) in `recv`."""
        s, r, n, code, st = self._args(send, recv, dtype, count, stream, divide=self.info()[1])
        check(lib.gpurt_comm_reduce_scatter(s, r, n, code, op, self._handle, st))

    def send(self, buf, peer, dtype="float32", count=None, stream=None):
        """Sends `buf` to rank `peer` (pair with its `recv`, in a group where both
        sides are driven by one thread)."""
        s, _, n, code, st = self._args(buf, None, dtype, count, stream)
        check(lib.gpurt_comm_send(s, n, code, peer, self._handle, st))

    def recv(self, buf, peer, dtype="float32", count=None, stream=None):
        """Receives into `buf` from rank `peer`."""
        _, r, n, code, st = self._args(buf, None, dtype, count, stream)
        check(lib.gpurt_comm_recv(r, n, code, peer, self._handle, st))

    def info(self):
        """(rank, number of ranks, device)."""
        rank, nranks, device = ffi.new("int*"), ffi.new("int*"), ffi.new("int*")
        check(lib.gpurt_comm_info(self._handle, rank, nranks, device))
        return rank[0], nranks[0], device[0]

    def abort(self):
        """Cancels pending work and releases the communicator (after a peer failed)."""
        check(lib.gpurt_comm_abort(self._handle))
        self._handle = ffi.NULL


# torch.cuda.comm's helpers: one process over several GPUs, no NCCL needed. Inputs
# are read after the work queued on their devices' current streams; each output is
# a new DeviceBuffer on its device, ready on that device's current stream.

_BY_TYPESTR = {"<f4": "float32", "<f2": "float16", "<i4": "int32", "<f8": "float64", "<i8": "int64"}
_BY_SIZE = {2: "float16", 4: "int32", 8: "int64"}  # moving bytes, any type of that size will do


def _dtype(buf, dtype, for_sum):
    """The gpurt dtype name of a buffer's elements: `dtype` where given, else its
    typestr's; a copy needs only the element size."""
    if dtype is None:
        dtype = _BY_TYPESTR.get(buf.typestr) or (None if for_sum else _BY_SIZE.get(int(buf.typestr[2:])))
    if dtype not in _DTYPES:
        raise ValueError(f"no gpurt dtype for {buf.typestr!r}: give dtype= one of {sorted(_DTYPES)}")
    return dtype


def _adopt(ptr, count, dtype, like, device):
    """A DeviceBuffer owning `ptr`: `count` elements of `dtype` on `device`, typed as `like`."""
    buf = DeviceBuffer.__new__(DeviceBuffer)
    buf._describe(count * _DTYPES[dtype][1], None, like.typestr, None, device)
    buf._handle = ptr
    return buf


def _pointers(buffers):
    """A C array of the buffers' device addresses."""
    return ffi.new("void*[]", [ffi.cast("void*", int(b)) for b in buffers])


def _device_of(buf):
    return buf.stream.device


def broadcast(buf, devices, dtype=None):
    """torch.cuda.comm.broadcast: a copy of `buf` on each of `devices`."""
    dtype, devices = _dtype(buf, dtype, False), list(devices)
    code, size = _DTYPES[dtype]
    count = buf.nbytes // size
    out = ffi.new("void*[]", len(devices))
    check(lib.gpurt_comm_broadcast(ffi.cast("void*", int(buf)), _device_of(buf), count, code,
                                   ffi.new("int[]", devices), len(devices), out))
    return [_adopt(out[i], count, dtype, buf, d) for i, d in enumerate(devices)]


def broadcast_coalesced(buffers, devices, buffer_size=10 << 20, dtype=None):
    """torch.cuda.comm.broadcast_coalesced: `buffers` (one device, one element size)
    to each of `devices`, packed into buckets of `buffer_size` bytes; a list per device."""
    buffers, devices = list(buffers), list(devices)
    dtype = _dtype(buffers[0], dtype, False)
    code, size = _DTYPES[dtype]
    counts = [b.nbytes // size for b in buffers]
    out = ffi.new("void*[]", len(devices) * len(buffers))
    check(lib.gpurt_comm_broadcast_coalesced(_pointers(buffers),
                                             ffi.new("size_t[]", counts), len(buffers), code, _device_of(buffers[0]),
                                             ffi.new("int[]", devices), len(devices), buffer_size, out))
    m = len(buffers)
    return [[_adopt(out[i * m + j], counts[j], dtype, buffers[j], d) for j in range(m)] for i, d in enumerate(devices)]


def reduce_add(inputs, destination=None, dtype=None):
    """torch.cuda.comm.reduce_add: the elementwise sum of `inputs` (one per device,
    equal sizes) on `destination` (default: the first input's device)."""
    inputs = list(inputs)
    dtype = _dtype(inputs[0], dtype, True)
    code, size = _DTYPES[dtype]
    devices = [_device_of(b) for b in inputs]
    destination = devices[0] if destination is None else destination
    count = inputs[0].nbytes // size
    out = ffi.new("void*[1]")
    check(lib.gpurt_comm_reduce_add(_pointers(inputs),
                                    ffi.new("int[]", devices), len(inputs), count, code, destination, out))
    return _adopt(out[0], count, dtype, inputs[0], destination)


def reduce_add_coalesced(inputs, destination=None, buffer_size=10 << 20, dtype=None):
    """torch.cuda.comm.reduce_add_coalesced: `inputs` is a list per device of
    buffers; buffer j of the result sums buffer j over the devices."""
    inputs = [list(per_device) for per_device in inputs]
    first = inputs[0]
    dtype = _dtype(first[0], dtype, True)
    code, size = _DTYPES[dtype]
    devices = [_device_of(per_device[0]) for per_device in inputs]
    destination = devices[0] if destination is None else destination
    counts = [b.nbytes // size for b in first]
    flat = _pointers([b for per_device in inputs for b in per_device])
    out = ffi.new("void*[]", len(first))
    check(lib.gpurt_comm_reduce_add_coalesced(flat, ffi.new("int[]", devices), len(devices),
                                              ffi.new("size_t[]", counts), len(first), code, destination,
                                              buffer_size, out))
    return [_adopt(out[j], counts[j], dtype, first[j], destination) for j in range(len(first))]


def scatter(buf, devices, chunk_sizes=None, dtype=None):
    """torch.cuda.comm.scatter: `buf` cut into one chunk per device (torch's
    `chunk`, or `chunk_sizes` elements each); an empty chunk is None."""
    dtype, devices = _dtype(buf, dtype, False), list(devices)
    code, size = _DTYPES[dtype]
    count = buf.nbytes // size
    chunks = ffi.NULL if chunk_sizes is None else ffi.new("size_t[]", list(chunk_sizes))
    out = ffi.new("void*[]", len(devices))
    check(lib.gpurt_comm_scatter(ffi.cast("void*", int(buf)), _device_of(buf), count, code,
                                 ffi.new("int[]", devices), len(devices), chunks, out))
    sizes = list(chunk_sizes) if chunk_sizes is not None else \
        [max(0, min(-(-count // len(devices)), count - i * -(-count // len(devices)))) for i in range(len(devices))]
    return [_adopt(out[i], sizes[i], dtype, buf, d) if sizes[i] else None for i, d in enumerate(devices)]


def gather(inputs, destination=None, dtype=None):
    """torch.cuda.comm.gather: `inputs` (one per device) one after the other in a
    new buffer on `destination` (default: the first input's device)."""
    inputs = list(inputs)
    dtype = _dtype(inputs[0], dtype, False)
    code, size = _DTYPES[dtype]
    devices = [_device_of(b) for b in inputs]
    destination = devices[0] if destination is None else destination
    counts = [b.nbytes // size for b in inputs]
    out = ffi.new("void*[1]")
    check(lib.gpurt_comm_gather(_pointers(inputs), ffi.new("int[]", devices),
                                ffi.new("size_t[]", counts), len(inputs), code, destination, out))
    return _adopt(out[0], sum(counts), dtype, inputs[0], destination)
