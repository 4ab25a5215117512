"""PyTorch on gpurt's allocator: `gpurt.torch.use_as_allocator()` before PyTorch
allocates any CUDA memory, and every tensor's memory comes from gpurt.

`torch.cuda.empty_cache()` empties gpurt's cache too (a pluggable allocator is not
told), as torch.cuda.graph does before each capture, and `Tensor.record_stream(s)`
reaches gpurt (PyTorch drops it for a pluggable allocator): a tensor used on another
stream is not reused before that stream's work, as on PyTorch's own allocator. Record
streams PyTorch's C++ code records by itself (not through `Tensor.record_stream`) are
not seen.

CUDA graphs work as on PyTorch's own allocator: a capture's allocations come from a
private gpurt pool that its graph holds until the graph and its executable are
destroyed (gpurt adopts captures it did not begin), and graphs captured with one
`pool=` token (torch.cuda.graph_pool_handle(), other_graph.pool(), what
make_graphed_callables passes) share one gpurt graph pool, as PyTorch's graph-private
pools are shared."""
import weakref

from ._native import check, ffi, lib, library_path
from .graphs import GraphPool, capture_pool
from .memory import empty_cache as _empty_gpurt_cache

#: PyTorch pool token (a tuple) to the gpurt graph pool its graphs share, while a graph
#: captured with it lives.
_shared_pools = weakref.WeakValueDictionary()


def use_as_allocator():
    """Makes gpurt PyTorch's CUDA allocator (through CUDAPluggableAllocator); call it
    before the first CUDA tensor. Returns the allocator object."""
    import torch

    allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path, "gpurt_torch_alloc", "gpurt_torch_free")
    torch.cuda.memory.change_current_allocator(allocator)
    _empty_gpurt_cache_too(torch.cuda)
    _record_streams_too(torch.Tensor)
    _share_graph_pools(torch.cuda.CUDAGraph)
    return allocator


def _empty_gpurt_cache_too(cuda):
    """Makes torch.cuda.empty_cache() give gpurt's cached memory back too: PyTorch does
    not pass it on to a pluggable allocator, and torch.cuda.graph empties the cache
    before each capture, as code that frees memory for another workload does."""
    original = cuda.memory.empty_cache
    if getattr(original, "_gpurt", False):
        return

    def empty_cache():
        original()
        _empty_gpurt_cache()

    empty_cache.__doc__, empty_cache._gpurt = original.__doc__, True
    cuda.memory.empty_cache = cuda.empty_cache = empty_cache


def _record_streams_too(tensor_class):
    """Makes Tensor.record_stream(stream) tell gpurt too: PyTorch's pluggable allocator
    drops it (Python cannot set its record-stream function), so a block freed on its
    own stream (a prefetch stream's upload, read on the main stream) would be handed to
    that stream's next allocation while the other stream still reads it."""
    original = tensor_class.record_stream
    if getattr(original, "_gpurt", False):
        return

    def record_stream(self, stream):
        original(self, stream)
        if not self.is_cuda:
            return
        try:
            storage = self.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return  # no storage of its own (a sparse tensor): PyTorch recorded what it has
        status = lib.gpurt_record_stream_native(ffi.cast("void *", storage.data_ptr()), ffi.cast("void *", stream.cuda_stream))
        if status != lib.GPURT_SUCCESS and status != lib.GPURT_ERROR_INVALID_ARGUMENT:
            check(status)  # memory gpurt did not allocate is ignored, as PyTorch ignores it

    record_stream.__doc__, record_stream._gpurt = original.__doc__, True
    tensor_class.record_stream = record_stream


def _share_graph_pools(cuda_graph):
    """Routes each torch.cuda.CUDAGraph capture to the gpurt graph pool of its PyTorch
    pool token: PyTorch does not pass the token to a pluggable allocator, so the capture
    binds the pool to its thread (gpurt.capture_pool) from capture_begin to capture_end."""
    if getattr(cuda_graph, "_gpurt_pools_shared", False):
        return
    begin, end = cuda_graph.capture_begin, cuda_graph.capture_end

    def capture_begin(self, pool=None, capture_error_mode="global"):
        begin(self, pool=pool, capture_error_mode=capture_error_mode)
        token = None if pool is None else tuple(pool)
        shared = None if token is None else _shared_pools.get(token)
        if shared is None:
            import torch

            shared = GraphPool(torch.cuda.current_device())
            if token is not None:
                _shared_pools[token] = shared
        self._gpurt_pool = shared  # lives while a graph of this token may capture again
        self._gpurt_binding = capture_pool(shared)
        self._gpurt_binding.__enter__()

    def capture_end(self):
        try:
            end(self)
        finally:
            binding = self.__dict__.pop("_gpurt_binding", None)
            if binding is not None:
                binding.__exit__(None, None, None)
        # pool=None: the graph's own token exists now; other_graph.pool() passes it later
        _shared_pools.setdefault(tuple(self.pool()), self._gpurt_pool)

    capture_begin.__doc__, capture_end.__doc__ = begin.__doc__, end.__doc__
    cuda_graph.capture_begin, cuda_graph.capture_end = capture_begin, capture_end
    cuda_graph._gpurt_pools_shared = True
