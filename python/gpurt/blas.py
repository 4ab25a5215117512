"""The math libraries' handles (torch.cuda.current_blas_handle, CuPy's
get_cublas_handle): integers that cuBLAS, cuBLASLt, cuSOLVER, cuSPARSE or cuDNN
bindings take, each the calling thread's, bound to the stream with gpurt's workspace
for it. Use a handle on the thread that asked for it. Where a library is missing,
NotSupportedError names it."""
from ._handle import address, ordinal
from ._native import check, fetch, ffi, lib
from .streams import _stream, current_stream

LIBRARIES = {"cublas": lib.GPURT_MATH_CUBLAS, "cublaslt": lib.GPURT_MATH_CUBLASLT, "cusolver": lib.GPURT_MATH_CUSOLVER,
             "cusparse": lib.GPURT_MATH_CUSPARSE, "cudnn": lib.GPURT_MATH_CUDNN}


def _stream_or_current(stream):
    return current_stream() if stream is None else _stream(stream)


def _library(name):
    if name not in LIBRARIES:
        raise ValueError(f"unknown math library {name!r}: one of {', '.join(LIBRARIES)}")
    return LIBRARIES[name]


def _handle(call, stream):
    return address(fetch("void*", call, _stream_or_current(stream)._handle))


def current_blas_handle():
    """The cublasHandle_t for this thread's current stream on its current device."""
    return address(fetch("void*", lib.gpurt_current_blas_handle))


def get_cublas_handle():
    """CuPy's name for current_blas_handle()."""
    return current_blas_handle()


def blas_handle(stream=None):
    """The cublasHandle_t bound to `stream` (default: the current stream)."""
    return _handle(lib.gpurt_blas_handle, stream)


def blaslt_handle(stream=None):
    """(cublasLtHandle_t, workspace address, workspace bytes) for cublasLtMatmul on `stream`."""
    handle, workspace, size = ffi.new("void**"), ffi.new("void**"), ffi.new("size_t*")
    check(lib.gpurt_blaslt_handle(_stream_or_current(stream)._handle, handle, workspace, size))
    return address(handle[0]), address(workspace[0]), size[0]


def solver_handle(stream=None):
    """The cusolverDnHandle_t bound to `stream`."""
    return _handle(lib.gpurt_solver_handle, stream)


def sparse_handle(stream=None):
    """The cusparseHandle_t bound to `stream`."""
    return _handle(lib.gpurt_sparse_handle, stream)


def dnn_handle(stream=None):
    """The cudnnHandle_t bound to `stream`."""
    return _handle(lib.gpurt_dnn_handle, stream)


def set_allow_tf32(allow):
    """torch.backends.cuda.matmul.allow_tf32 for gpurt's cuBLAS handles."""
    check(lib.gpurt_blas_set_allow_tf32(1 if allow else 0))


def get_allow_tf32():
    return bool(fetch("int", lib.gpurt_blas_get_allow_tf32))


def clear_workspaces(device=None):
    """Gives the workspaces of the device's idle cuBLAS and cuBLASLt handles back to its pool."""
    check(lib.gpurt_blas_clear_workspaces(ordinal(device)))


def release_handles(device=None):
    """Destroys the device's cuBLAS and cuBLASLt handles, threads' included, giving back
    the memory the libraries keep per handle (64 MiB each on an H200); each thread's
    next handle() is a new one with the old one's math mode. Ask for a handle again
    after: one from before must not be used."""
    check(lib.gpurt_blas_handles_release(ordinal(device)))


def library_version(name):
    """A library's version as MAJOR*10000 + MINOR*100 + PATCH ("cublas", "cublaslt",
    "cusolver", "cusparse", "cudnn")."""
    return fetch("int", lib.gpurt_math_library_version, _library(name))


def handle_counts(name, device=None):
    """(handles created, handles idle) of a library on a device."""
    created, idle = ffi.new("size_t*"), ffi.new("size_t*")
    check(lib.gpurt_math_handle_counts(_library(name), ordinal(device), created, idle))
    return created[0], idle[0]
