"""Kernels compiled at run time: elementwise expressions (cupy.ElementwiseKernel's
simplest form) over device buffers."""
from ._native import check, ffi, lib
from .streams import current_stream

# name: (gpurt_dtype_t, bytes per element)
_DTYPES = {"float32": (lib.GPURT_DTYPE_F32, 4), "float16": (lib.GPURT_DTYPE_F16, 2),
           "bfloat16": (lib.GPURT_DTYPE_BF16, 2), "int32": (lib.GPURT_DTYPE_I32, 4),
           "float64": (lib.GPURT_DTYPE_F64, 8), "int64": (lib.GPURT_DTYPE_I64, 8)}


def elementwise(expression, inputs, out, dtype="float32", count=None, stream=None):
    """Computes `expression` ("out = a * b + c") elementwise: `inputs` maps each
    name to a device buffer (or address), `out` receives the result; `count`
    elements (default: out's length in `dtype`) on `stream` (default: current).
    Several statements ("s = a + b; d = s * c") write several outputs from one
    kernel: `out` is then a list of buffers, one per statement, in order."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, not {dtype!r}")
    outputs = list(out) if isinstance(out, (list, tuple)) else [out]
    if count is None:
        count = len(outputs[0]) // _DTYPES[dtype][1]
    names = [ffi.new("char[]", name.encode()) for name in inputs]
    name_array = ffi.new("const char*[]", names)
    pointer_array = ffi.new("const void*[]", [ffi.cast("void*", int(buffer)) for buffer in inputs.values()])
    output_array = ffi.new("void*[]", [ffi.cast("void*", int(buffer)) for buffer in outputs])
    stream = current_stream() if stream is None else stream
    check(lib.gpurt_elementwise_multi(expression.encode(), name_array, pointer_array, len(names), _DTYPES[dtype][0],
                                      int(count), output_array, len(outputs), stream.handle))
