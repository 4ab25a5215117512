package org.gpurt;

import com.sun.jna.ptr.FloatByReference;
import com.sun.jna.ptr.PointerByReference;

/** A gpurt event. */
public final class Event extends Owner {
    private Event(com.sun.jna.Pointer handle) {
        super(handle, NativeLib.C::gpurt_event_destroy);
    }

    /** A new event on `device`; `timing` enables elapsedTime. */
    public static Event create(int device, boolean timing) {
        PointerByReference h = new PointerByReference();
        Gpurt.check(NativeLib.C.gpurt_event_create(device, timing ? 0 : 2 /* GPURT_EVENT_DISABLE_TIMING */, h));
        return new Event(h.getValue());
    }

    public void record(Stream stream) {
        run(h -> NativeLib.C.gpurt_event_record(h, stream.handle()), stream);
    }

    public void synchronize() {
        run(NativeLib.C::gpurt_event_synchronize);
    }

    /** Milliseconds from this event to `end`. */
    public float elapsedTime(Event end) {
        FloatByReference ms = new FloatByReference();
        run(h -> NativeLib.C.gpurt_event_elapsed_time(h, end.handle(), ms), end);
        return ms.getValue();
    }
}
