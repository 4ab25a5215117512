package org.gpurt;

import com.sun.jna.Memory;
import com.sun.jna.ptr.PointerByReference;

/** A memory pool beside the device's default one (torch.cuda.MemPool); close() is
 *  refused, and the pool kept, while it holds live buffers. */
public final class MemPool extends Owner {
    private MemPool(com.sun.jna.Pointer handle) {
        super(handle, NativeLib.C::gpurt_mem_pool_destroy);
    }

    /** A pool on `device` with the process's allocator configuration. */
    public static MemPool create(int device) {
        Memory options = Gpurt.sized(4096);
        Gpurt.check(NativeLib.C.gpurt_mem_pool_options_init(options));
        PointerByReference h = new PointerByReference();
        Gpurt.check(NativeLib.C.gpurt_mem_pool_create(device, options, h));
        return new MemPool(h.getValue());
    }

    /** `size` bytes from this pool for use on `stream`. */
    public DeviceBuffer allocate(long size, Stream stream) {
        if (size < 0) throw new GpurtException(GpurtException.INVALID_ARGUMENT, "MemPool.allocate: size " + size + " is negative");
        long[] p = new long[1];
        run(pool -> DirectLib.gpurt_mem_pool_malloc(pool, size, stream.handle(), p), stream);
        return new DeviceBuffer(new com.sun.jna.Pointer(p[0]), size, stream, this);
    }

    public Gpurt.MemoryStats stats() {
        Memory m = Gpurt.sized(4096);
        run(pool -> NativeLib.C.gpurt_mem_pool_stats(pool, m));
        return Gpurt.MemoryStats.from(m);
    }
}
