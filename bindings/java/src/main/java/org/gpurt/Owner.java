package org.gpurt;

import com.sun.jna.Pointer;
import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.ToIntFunction;

/**
 * One C handle or pointer, released once: by close(), or by the Cleaner when the
 * program dropped its owner. gpurt's releases are safe from any thread, so the
 * Cleaner's thread may run them. A failed release (a pool with live buffers) keeps
 * the handle, and close() can be called again.
 */
abstract class Owner implements AutoCloseable {
    private static final Cleaner CLEANER = Cleaner.create();

    /** The handle and how to release it; holds no reference to its owner. */
    private static final class Release implements Runnable {
        final AtomicReference<Pointer> handle;
        final ToIntFunction<Pointer> release;

        Release(Pointer handle, ToIntFunction<Pointer> release) {
            this.handle = new AtomicReference<>(handle);
            this.release = release;
        }

        @Override
        public void run() {
            Pointer p = handle.getAndSet(null);
            if (p == null) return;
            int status = release.applyAsInt(p);
            if (status != 0) {
                String message = NativeLib.C.gpurt_last_error_message();
                handle.set(p); // still ours: close() may try again
                throw new GpurtException(status, message);
            }
        }
    }

    private final Release release;
    private final Cleaner.Cleanable cleanable;

    Owner(Pointer handle, ToIntFunction<Pointer> release) {
        this.release = new Release(handle, release);
        this.cleanable = CLEANER.register(this, this.release);
    }

    /** The handle; GpurtException(INVALID_HANDLE) once closed. */
    Pointer handle() {
        Pointer p = release.handle.get();
        if (p == null) throw new GpurtException(GpurtException.INVALID_HANDLE, getClass().getSimpleName() + " is closed");
        return p;
    }

    boolean isClosed() {
        return release.handle.get() == null;
    }

    /** Runs `call` on the handle, with this owner reachable until it returns. */
    final void run(ToIntFunction<Pointer> call) {
        run(call, null);
    }

    /** `run`, keeping `other` (an owner whose handle `call` uses too) reachable as well. */
    final void run(ToIntFunction<Pointer> call, Owner other) {
        try {
            Gpurt.check(call.applyAsInt(handle()));
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(other);
        }
    }

    @Override
    public void close() {
        release.run(); // throws, keeping the handle, if gpurt refuses
        cleanable.clean(); // released: nothing left for the Cleaner
    }
}
