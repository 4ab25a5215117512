"""Loads libgpurt and declares its C API to cffi (ABI mode) from gpurt.h itself.

The declarations are read from the header that was installed with the library, so
they always match it: nothing here restates a C signature. `lib` is the loaded
library, `ffi` the cffi instance, `check` turns a status into an exception.
"""
import ast
import operator
import os
import re

import cffi

from .errors import error_for

_HERE = os.path.dirname(os.path.abspath(__file__))

#: The shared library in use: GPURT_LIBRARY if set, else the one inside the package.
library_path = os.environ.get("GPURT_LIBRARY") or os.path.join(_HERE, "_lib", "libgpurt.so")
#: Its header: GPURT_HEADER if set, else the one inside the package.
header_path = os.environ.get("GPURT_HEADER") or os.path.join(_HERE, "include", "gpurt.h")

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.LShift: operator.lshift, ast.BitOr: operator.or_}


def _integer(expression):
    """The value of an integer constant expression such as `(4 << 20)` or `(-1)`, or
    None for anything else (a macro with arguments, an initialiser)."""
    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](value(node.left), value(node.right))
        raise ValueError(expression)
    try:
        return value(ast.parse(expression.strip(), mode="eval").body)
    except (SyntaxError, ValueError):
        return None


def declarations(header):
    """gpurt.h as cffi's cdef accepts it: the C branch of `#ifdef __cplusplus`
    blocks, integer macros as `#define NAME value`, no other preprocessor lines."""
    out, skipping, depth = [], False, 0
    for line in header.splitlines():
        directive = line.strip()
        if directive.startswith("#ifdef __cplusplus"):
            skipping, depth = True, 1
            continue
        if skipping:
            if directive.startswith("#if"):
                depth += 1
            elif directive.startswith("#endif"):
                depth -= 1
                skipping = depth > 0
            elif directive.startswith("#else") and depth == 1:
                skipping = False
            continue
        if directive.startswith("#"):
            define = re.match(r"#define\s+(GPURT_\w+)\s+(.+?)\s*(?://.*|/\*.*)?$", directive)
            if define and define.group(1) != "GPURT_VERSION":
                value = _integer(define.group(2))
                if value is not None:
                    out.append(f"#define {define.group(1)} {value}")
            continue
        out.append(line)
    return "\n".join(out)


def _load():
    try:
        with open(header_path, encoding="utf-8") as f:
            header = f.read()
    except OSError as e:
        raise ImportError(f"gpurt: cannot read the C header {header_path} ({e}); "
                          "install the package with `pip install .`, or set GPURT_HEADER") from e
    ffi = cffi.FFI()
    ffi.cdef(declarations(header))
    try:
        lib = ffi.dlopen(library_path)
    except OSError as e:
        raise ImportError(f"gpurt: cannot load {library_path} ({e}); set GPURT_LIBRARY to libgpurt.so") from e
    return ffi, lib


ffi, lib = _load()


def last_error_message():
    return ffi.string(lib.gpurt_last_error_message()).decode("utf-8", "replace")


_STATUS_NAMES = ffi.typeof("gpurt_status_t").elements  # value -> "GPURT_ERROR_..."


def check(status):
    """Raises the exception for a failed status, with this thread's message (or the
    status's description where the call left none)."""
    if status != lib.GPURT_SUCCESS:
        message = last_error_message() or ffi.string(lib.gpurt_status_string(status)).decode()
        name = _STATUS_NAMES.get(status, f"status {status}")
        raise error_for(name)(status, name, message)


def ready(status):
    """A query's answer: False for GPURT_ERROR_NOT_READY, True for success, and the
    exception for anything else."""
    if status == lib.GPURT_ERROR_NOT_READY:
        return False
    check(status)
    return True


def fetch(ctype, call, *args):
    """Calls `call(*args, &value)` with a fresh `ctype` out-parameter and returns it."""
    value = ffi.new(ctype + "*")
    check(call(*args, value))
    return value[0]
