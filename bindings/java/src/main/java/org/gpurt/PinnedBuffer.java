package org.gpurt;

import com.sun.jna.Pointer;
import com.sun.jna.ptr.PointerByReference;
import java.nio.ByteBuffer;

/** Page-locked host memory from gpurt's default pinned pool. */
public final class PinnedBuffer extends Owner {
    private final long size;

    private PinnedBuffer(Pointer ptr, long size) {
        super(ptr, NativeLib.C::gpurt_pinned_free);
        this.size = size;
    }

    public static PinnedBuffer allocate(long size) {
        if (size <= 0) throw new GpurtException(GpurtException.INVALID_ARGUMENT, "PinnedBuffer.allocate: size " + size + " is not positive");
        PointerByReference pool = new PointerByReference(), p = new PointerByReference();
        Gpurt.check(NativeLib.C.gpurt_pinned_pool_default(pool));
        Gpurt.check(NativeLib.C.gpurt_pinned_malloc(pool.getValue(), size, p));
        return new PinnedBuffer(p.getValue(), size);
    }

    public long size() {
        return size;
    }

    /** The memory as a direct ByteBuffer, valid until close(). */
    public ByteBuffer byteBuffer() {
        return handle().getByteBuffer(0, size);
    }
}
