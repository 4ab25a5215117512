package org.gpurt;

import com.sun.jna.Pointer;
import com.sun.jna.ptr.PointerByReference;

/** A gpurt stream; close() releases a created one (queued work still runs). */
public final class Stream extends Owner {
    public static final int CAPTURE_GLOBAL = 0, CAPTURE_THREAD_LOCAL = 1, CAPTURE_RELAXED = 2;
    private final int device;

    private Stream(Pointer handle, int device) {
        super(handle, NativeLib.C::gpurt_stream_destroy);
        this.device = device;
    }

    /** A new non-blocking stream on `device` with `priority` (0: the default). */
    public static Stream create(int device, int priority) {
        PointerByReference h = new PointerByReference();
        Gpurt.check(NativeLib.C.gpurt_stream_create(device, 1 /* GPURT_STREAM_NON_BLOCKING */, priority, h));
        return new Stream(h.getValue(), device);
    }

    /** One of the device's pooled streams; closing it is a no-op. */
    public static Stream fromPool(int device, boolean highPriority) {
        PointerByReference h = new PointerByReference();
        Gpurt.check(NativeLib.C.gpurt_stream_from_pool(device, highPriority ? 1 : 0, h));
        return new Stream(h.getValue(), device);
    }

    public int device() {
        return device;
    }

    public void synchronize() {
        run(NativeLib.C::gpurt_stream_synchronize);
    }

    /** Whether the stream's work is done. */
    public boolean query() {
        int[] status = new int[1];
        run(h -> {
            status[0] = NativeLib.C.gpurt_stream_query(h);
            return status[0] == GpurtException.NOT_READY ? 0 : status[0];
        });
        return status[0] == 0;
    }

    /** The CUstream / cudaStream_t for cuBLAS, cuDNN and kernels. */
    public long nativeStream() {
        PointerByReference n = new PointerByReference();
        run(h -> NativeLib.C.gpurt_stream_native(h, n));
        return Pointer.nativeValue(n.getValue());
    }

    /** Makes later work on this stream wait for `event`. */
    public void waitEvent(Event event) {
        run(h -> NativeLib.C.gpurt_stream_wait_event(h, event.handle()), event);
    }

    /** Starts capturing this stream's work into a graph (use CAPTURE_RELAXED or _THREAD_LOCAL). */
    public void beginCapture(int mode) {
        run(h -> NativeLib.C.gpurt_stream_begin_capture(h, mode, Pointer.NULL));
    }

    public Graph endCapture() {
        PointerByReference g = new PointerByReference();
        run(h -> NativeLib.C.gpurt_stream_end_capture(h, g));
        return new Graph(g.getValue());
    }
}
