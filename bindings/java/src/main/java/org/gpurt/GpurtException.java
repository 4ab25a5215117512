package org.gpurt;

/** A failed gpurt call: its status (a gpurt_status_t) and gpurt's message for it. */
public class GpurtException extends RuntimeException {
    public static final int INVALID_ARGUMENT = 1, INVALID_HANDLE = 2, NO_DRIVER = 3, NO_DEVICE = 4, OUT_OF_MEMORY = 5,
            NOT_READY = 6, NOT_SUPPORTED = 7;
    private static final long serialVersionUID = 1L;
    private final int status;

    public GpurtException(int status, String message) {
        super(message);
        this.status = status;
    }

    public int status() {
        return status;
    }
}
