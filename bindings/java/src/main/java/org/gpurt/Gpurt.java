package org.gpurt;

import com.sun.jna.Memory;
import com.sun.jna.Pointer;
import com.sun.jna.ptr.IntByReference;
import com.sun.jna.ptr.PointerByReference;

/**
 * gpurt from Java: devices and the allocator's statistics here; Stream, Event,
 * DeviceBuffer, PinnedBuffer, MemPool, Graph and Generator own what they name.
 *
 * <p>Each call's error message is read on the calling Java thread right after the
 * call, so it is that call's. Calls name their device or stream: gpurt's per-thread
 * current device and stream are not used.
 */
public final class Gpurt {
    private Gpurt() {}

    /** The C library's version, MAJOR*10000 + MINOR*100 + PATCH. */
    public static int version() {
        return NativeLib.C.gpurt_version();
    }

    /** Throws the GpurtException for a failed status, with this thread's message. */
    static void check(int status) {
        if (status != 0) throw new GpurtException(status, NativeLib.C.gpurt_last_error_message());
    }

    /** Devices visible here; 0 where there is no driver. */
    public static int deviceCount() {
        IntByReference n = new IntByReference();
        check(NativeLib.C.gpurt_device_count(n));
        return n.getValue();
    }

    /** A device's name. */
    public static String deviceName(int device) {
        Memory props = sized(4096);
        check(NativeLib.C.gpurt_device_get_properties(device, props));
        return props.getString(8);
    }

    public static void synchronize(int device) {
        check(NativeLib.C.gpurt_device_synchronize(device));
    }

    /** Gives every device's cached, unused memory back to the driver. */
    public static void emptyCache() {
        check(NativeLib.C.gpurt_empty_cache());
    }

    /** One statistic: current value, peak, totals added and removed. */
    public record Stat(long current, long peak, long allocated, long freed) {
        static Stat at(Memory m, long offset) {
            return new Stat(m.getLong(offset), m.getLong(offset + 8), m.getLong(offset + 16), m.getLong(offset + 24));
        }
    }

    /** torch.cuda.memory_stats()'s "all" figures. */
    public record MemoryStats(Stat allocations, Stat segments, Stat allocatedBytes, Stat reservedBytes) {
        // gpurt_memory_stats_t: struct_size, then gpurt_stat_array_t fields of 3 x 32 bytes.
        static MemoryStats from(Memory m) {
            return new MemoryStats(Stat.at(m, 8), Stat.at(m, 8 + 96), Stat.at(m, 8 + 4 * 96), Stat.at(m, 8 + 5 * 96));
        }
    }

    /** A device's allocator statistics. */
    public static MemoryStats memoryStats(int device) {
        Memory m = sized(4096);
        check(NativeLib.C.gpurt_memory_stats(device, m));
        return MemoryStats.from(m);
    }

    /** The default pinned pool's allocations and bytes. */
    public static MemoryStats pinnedStats() {
        PointerByReference pool = new PointerByReference();
        check(NativeLib.C.gpurt_pinned_pool_default(pool));
        Memory m = sized(4096);
        check(NativeLib.C.gpurt_pinned_stats(pool.getValue(), m));
        // gpurt_host_memory_stats_t: struct_size, allocations, allocated_bytes, reserved_bytes, segment.
        return new MemoryStats(Stat.at(m, 8), Stat.at(m, 8 + 96), Stat.at(m, 8 + 32), Stat.at(m, 8 + 64));
    }

    /** A zeroed extensible struct of `size` bytes whose struct_size says so. */
    static Memory sized(int size) {
        Memory m = new Memory(size);
        m.clear();
        m.setLong(0, size);
        return m;
    }

    static Pointer orNull(Owner o) {
        return o == null ? Pointer.NULL : o.handle();
    }
}
