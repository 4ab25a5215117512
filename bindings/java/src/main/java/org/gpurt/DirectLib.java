package org.gpurt;

import com.sun.jna.Native;
import com.sun.jna.Pointer;

/**
 * The allocation hot path through JNA's direct mapping (native methods bound at
 * class load), several times cheaper per call than NativeLib's interface mapping.
 * Out-parameters are one-element long arrays.
 */
final class DirectLib {
    static {
        Native.register(System.getProperty("gpurt.library", "gpurt"));
    }

    private DirectLib() {}

    static native int gpurt_malloc(long size, Pointer stream, long[] ptr);
    static native int gpurt_mem_pool_malloc(Pointer pool, long size, Pointer stream, long[] ptr);
    static native int gpurt_free(Pointer ptr);
}
