package org.gpurt;

import com.sun.jna.Memory;
import com.sun.jna.Pointer;

/** Device memory from gpurt's caching allocator (or a MemPool), for one stream. */
public final class DeviceBuffer extends Owner {
    private final long size;
    private final Stream stream;
    private final MemPool pool; // kept reachable while the buffer lives

    DeviceBuffer(Pointer ptr, long size, Stream stream, MemPool pool) {
        super(ptr, DirectLib::gpurt_free);
        this.size = size;
        this.stream = stream;
        this.pool = pool;
    }

    /** `size` bytes on the stream's device, for use on `stream`. */
    public static DeviceBuffer allocate(long size, Stream stream) {
        if (size < 0) throw new GpurtException(GpurtException.INVALID_ARGUMENT, "DeviceBuffer.allocate: size " + size + " is negative");
        long[] p = new long[1];
        stream.run(s -> DirectLib.gpurt_malloc(size, s, p));
        return new DeviceBuffer(new Pointer(p[0]), size, stream, null);
    }

    public long size() {
        return size;
    }

    public Stream stream() {
        return stream;
    }

    /** The device address. */
    public long address() {
        return Pointer.nativeValue(handle());
    }

    private void checkFits(long n) {
        if (n > size) throw new GpurtException(GpurtException.INVALID_ARGUMENT, "a copy of " + n + " bytes does not fit a buffer of " + size);
    }

    /** Copies `src` to the start of the buffer on its stream, and waits for it. */
    public void copyFromHost(byte[] src) {
        checkFits(src.length);
        if (src.length == 0) return;
        Memory staging = new Memory(src.length);
        staging.write(0, src, 0, src.length);
        run(p -> NativeLib.C.gpurt_memcpy(p, staging, src.length, stream.handle()));
    }

    /** Copies the start of the buffer into `dst` on its stream, and waits for it. */
    public void copyToHost(byte[] dst) {
        checkFits(dst.length);
        if (dst.length == 0) return;
        Memory staging = new Memory(dst.length);
        run(p -> NativeLib.C.gpurt_memcpy(staging, p, dst.length, stream.handle()));
        staging.read(0, dst, 0, dst.length);
    }

    /** Copies the start of the buffer into pinned memory, and waits for it. */
    public void copyToPinned(PinnedBuffer dst) {
        checkFits(dst.size());
        run(p -> NativeLib.C.gpurt_memcpy(dst.handle(), p, dst.size(), stream.handle()), dst);
    }
}
