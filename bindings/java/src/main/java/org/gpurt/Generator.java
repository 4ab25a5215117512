package org.gpurt;

import com.sun.jna.ptr.PointerByReference;

/** A seeded Philox generator of one device (torch.Generator). */
public final class Generator extends Owner {
    private Generator(com.sun.jna.Pointer handle) {
        super(handle, NativeLib.C::gpurt_generator_destroy);
    }

    public static Generator create(int device, long seed) {
        PointerByReference h = new PointerByReference();
        Gpurt.check(NativeLib.C.gpurt_generator_create(device, seed, h));
        return new Generator(h.getValue());
    }

    /** Fills the first `n` floats of `buffer` with uniform numbers in [0, 1), on its stream. */
    public void uniform(DeviceBuffer buffer, long n) {
        if (n < 0 || n * 4 > buffer.size())
            throw new GpurtException(GpurtException.INVALID_ARGUMENT, n + " floats do not fit a buffer of " + buffer.size() + " bytes");
        run(g -> NativeLib.C.gpurt_random_uniform(g, buffer.handle(), n, 0 /* GPURT_DTYPE_F32 */, buffer.stream().handle()), buffer);
    }
}
