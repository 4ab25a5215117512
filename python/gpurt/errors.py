"""gpurt's statuses as Python exceptions: `gpurt.Error` carries the status, its name
and the C library's message; each failing status has its own subclass."""


class Error(RuntimeError):
    """A gpurt call failed. `status` is the gpurt_status_t, `name` its C name
    ("GPURT_ERROR_NO_DRIVER"), `message` the C library's detail."""

    def __init__(self, status, name, message):
        super().__init__(f"{message} [{name}]")
        self.status, self.name, self.message = status, name, message


class InvalidArgumentError(Error, ValueError):
    """GPURT_ERROR_INVALID_ARGUMENT."""


class InvalidHandleError(Error):
    """GPURT_ERROR_INVALID_HANDLE: NULL, destroyed, or of another kind."""


class NoDriverError(Error):
    """GPURT_ERROR_NO_DRIVER: libcuda could not be loaded."""


class NoDeviceError(Error):
    """GPURT_ERROR_NO_DEVICE."""


class OutOfMemoryError(Error, MemoryError):
    """GPURT_ERROR_OUT_OF_MEMORY (torch.cuda.OutOfMemoryError)."""


class NotSupportedError(Error):
    """GPURT_ERROR_NOT_SUPPORTED."""


class StreamCaptureError(Error):
    """GPURT_ERROR_STREAM_CAPTURE: illegal while a stream is being captured."""


class CudaError(Error):
    """GPURT_ERROR_CUDA: see `gpurt.last_cuda_error()` for the CUresult."""


class CompilationError(Error):
    """GPURT_ERROR_COMPILATION: the message holds NVRTC's log."""


class ForkedError(Error):
    """GPURT_ERROR_FORKED: CUDA cannot be used in a fork()ed child; use spawn."""


class FileError(Error, OSError):
    """GPURT_ERROR_IO: a file could not be read or written (gpurt.gds)."""


class CommError(Error):
    """GPURT_ERROR_COMM: a peer, the network or NCCL failed, or a peer did not join in time."""


_BY_NAME = {"GPURT_ERROR_INVALID_ARGUMENT": InvalidArgumentError, "GPURT_ERROR_INVALID_HANDLE": InvalidHandleError,
            "GPURT_ERROR_NO_DRIVER": NoDriverError, "GPURT_ERROR_NO_DEVICE": NoDeviceError,
            "GPURT_ERROR_OUT_OF_MEMORY": OutOfMemoryError, "GPURT_ERROR_NOT_SUPPORTED": NotSupportedError,
            "GPURT_ERROR_STREAM_CAPTURE": StreamCaptureError, "GPURT_ERROR_CUDA": CudaError,
            "GPURT_ERROR_COMPILATION": CompilationError, "GPURT_ERROR_FORKED": ForkedError,
            "GPURT_ERROR_IO": FileError, "GPURT_ERROR_COMM": CommError}


def error_for(name):
    """The exception class for a status's C name; `Error` for the others."""
    return _BY_NAME.get(name, Error)
