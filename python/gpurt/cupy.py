"""CuPy on gpurt's allocator: `gpurt.cupy.use_as_allocator()` and CuPy's arrays
allocate from gpurt's caching pool (cupy.cuda.set_allocator)."""
from ._native import ffi, lib


def use_as_allocator():
    """Makes gpurt CuPy's device allocator for this thread; returns the allocator
    function given to cupy.cuda.set_allocator."""
    import cupy

    malloc = int(ffi.cast("uintptr_t", lib.gpurt_cupy_malloc))
    free = int(ffi.cast("uintptr_t", lib.gpurt_cupy_free))
    allocator = cupy.cuda.memory.CFunctionAllocator(0, malloc, free, None).malloc
    cupy.cuda.set_allocator(allocator)
    return allocator
