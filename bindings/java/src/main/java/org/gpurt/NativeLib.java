package org.gpurt;

import com.sun.jna.Library;
import com.sun.jna.Memory;
import com.sun.jna.Native;
import com.sun.jna.Pointer;
import com.sun.jna.ptr.FloatByReference;
import com.sun.jna.ptr.IntByReference;
import com.sun.jna.ptr.PointerByReference;

/** gpurt's C functions as JNA calls them (only those this package uses). */
interface NativeLib extends Library {
    NativeLib C = Native.load(System.getProperty("gpurt.library", "gpurt"), NativeLib.class);

    int gpurt_version();
    String gpurt_last_error_message();
    String gpurt_status_string(int status);

    int gpurt_device_count(IntByReference count);
    int gpurt_device_get_properties(int device, Memory properties);
    int gpurt_mem_get_info(int device, PointerByReference free, PointerByReference total);
    int gpurt_device_synchronize(int device);

    int gpurt_stream_create(int device, int flags, int priority, PointerByReference stream);
    int gpurt_stream_from_pool(int device, int highPriority, PointerByReference stream);
    int gpurt_stream_destroy(Pointer stream);
    int gpurt_stream_synchronize(Pointer stream);
    int gpurt_stream_query(Pointer stream);
    int gpurt_stream_native(Pointer stream, PointerByReference nativeStream);
    int gpurt_stream_wait_event(Pointer stream, Pointer event);
    int gpurt_stream_begin_capture(Pointer stream, int mode, Pointer pool);
    int gpurt_stream_end_capture(Pointer stream, PointerByReference graph);

    int gpurt_event_create(int device, int flags, PointerByReference event);
    int gpurt_event_destroy(Pointer event);
    int gpurt_event_record(Pointer event, Pointer stream);
    int gpurt_event_synchronize(Pointer event);
    int gpurt_event_query(Pointer event);
    int gpurt_event_elapsed_time(Pointer start, Pointer end, FloatByReference milliseconds);

    int gpurt_memcpy(Pointer dst, Pointer src, long bytes, Pointer stream);
    int gpurt_memory_stats(int device, Memory stats);
    int gpurt_empty_cache();

    int gpurt_mem_pool_options_init(Memory options);
    int gpurt_mem_pool_create(int device, Memory options, PointerByReference pool);
    int gpurt_mem_pool_destroy(Pointer pool);
    int gpurt_mem_pool_stats(Pointer pool, Memory stats);

    int gpurt_pinned_pool_default(PointerByReference pool);
    int gpurt_pinned_malloc(Pointer pool, long size, PointerByReference ptr);
    int gpurt_pinned_free(Pointer ptr);
    int gpurt_pinned_stats(Pointer pool, Memory stats);

    int gpurt_graph_instantiate(Pointer graph, long flags, Pointer uploadStream, PointerByReference exec);
    int gpurt_graph_launch(Pointer exec, Pointer stream);
    int gpurt_graph_destroy(Pointer graph);
    int gpurt_graph_exec_destroy(Pointer exec);

    int gpurt_generator_create(int device, long seed, PointerByReference generator);
    int gpurt_generator_destroy(Pointer generator);
    int gpurt_random_uniform(Pointer generator, Pointer out, long n, int dtype, Pointer stream);
}
