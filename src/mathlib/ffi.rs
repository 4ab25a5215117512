use libc::{c_int, c_void};

use super::{Bound, Library};
use crate::boundary::{self, Out};
use crate::error::{gpurt_status_t, Error, Result};
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// A math library: the `library` of `gpurt_math_library_version` and
/// `gpurt_math_handle_counts`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum gpurt_math_library_t {
    GPURT_MATH_CUBLAS = 0,
    GPURT_MATH_CUBLASLT = 1,
    GPURT_MATH_CUSOLVER = 2,
    GPURT_MATH_CUSPARSE = 3,
    GPURT_MATH_CUDNN = 4,
}

/// The library a C caller's value names (an int: a C caller may pass any).
fn library(value: c_int) -> Result<Library> {
    super::loader::LIBRARIES
        .get(value as usize)
        .filter(|_| value >= 0)
        .copied()
        .ok_or_else(|| Error::invalid_argument(format!("`library` {value} is not a gpurt_math_library_t")))
}

/// Writes the handle of `bound`.
fn handle_out(out: Out<*mut c_void>, bound: Bound) {
    out.write(bound.handle as *mut c_void)
}

/// This thread's `library` handle for `stream`, checked in the order every handle
/// call keeps: the out-parameter, the stream, then the library.
fn stream_handle(name: &'static str, library: Library, stream: gpurt_stream_t, handle: *mut *mut c_void) -> gpurt_status_t {
    boundary::call(name, || {
        let out = Out::new(handle, "handle")?;
        handle_out(out, super::for_stream(library, Handle::from_ptr(stream))?);
        Ok(())
    })
}

/// A `cublasHandle_t` for `stream`'s device: the calling thread's until it exits
/// (then the next thread's), bound to `stream` (cublasSetStream) with gpurt's
/// workspace for that stream set (cublasSetWorkspace; `CUBLAS_WORKSPACE_CONFIG`, as
/// PyTorch reads it) and the math mode `gpurt_blas_set_allow_tf32` chose. Asking
/// again on the same stream costs a thread-local lookup; on another stream, cuBLAS's
/// two bind calls. Use the handle on this thread, with `stream`'s device current.
/// cuBLAS is loaded on first use: where it is missing, `GPURT_ERROR_NOT_SUPPORTED`.
///
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @param[out] handle receives a `cublasHandle_t`, owned by gpurt: do not destroy it; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_NOT_SUPPORTED, naming what was tried, where the library cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side: binds the handle to `stream` (the library's SetStream), enqueues nothing. The handle is for the calling thread; it is allowed during a capture.
#[no_mangle]
pub extern "C" fn gpurt_blas_handle(stream: gpurt_stream_t, handle: *mut *mut c_void) -> gpurt_status_t {
    stream_handle("gpurt_blas_handle", Library::Blas, stream, handle)
}

/// `gpurt_blas_handle` for the thread's current stream on its current device
/// (torch.cuda.current_blas_handle).
///
/// @param[out] handle receives a `cublasHandle_t` bound to the current stream; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_NOT_SUPPORTED, naming what was tried, where the library cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side: binds the handle to `stream` (the library's SetStream), enqueues nothing. The handle is for the calling thread; it is allowed during a capture.
#[no_mangle]
pub extern "C" fn gpurt_current_blas_handle(handle: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_current_blas_handle", || {
        let out = Out::new(handle, "handle")?;
        handle_out(out, super::for_current_stream(Library::Blas)?);
        Ok(())
    })
}

/// A `cublasLtHandle_t` for `stream`'s device (the calling thread's, as
/// `gpurt_blas_handle`), and the workspace to pass to `cublasLtMatmul` on `stream`:
/// `*workspace_size` bytes (`CUBLASLT_WORKSPACE_SIZE` KiB, default 1 MiB) from
/// gpurt's pool, kept for this handle and stream.
///
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @param[out] handle receives a `cublasLtHandle_t`, owned by gpurt; must not be NULL
/// @param[out] workspace receives device memory for cublasLtMatmul on `stream`; must not be NULL
/// @param[out] workspace_size receives the workspace's bytes; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_NOT_SUPPORTED, naming what was tried, where the library cannot be loaded; GPURT_ERROR_OUT_OF_MEMORY where the workspace cannot be allocated; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side: binds the handle to `stream` (the library's SetStream), enqueues nothing. The handle is for the calling thread; it is allowed during a capture.
#[no_mangle]
pub extern "C" fn gpurt_blaslt_handle(stream: gpurt_stream_t, handle: *mut *mut c_void, workspace: *mut *mut c_void, workspace_size: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_blaslt_handle", || {
        let out = Out::new(handle, "handle")?;
        let (workspace, workspace_size) = (Out::new(workspace, "workspace")?, Out::new(workspace_size, "workspace_size")?);
        let bound = super::for_stream(Library::BlasLt, Handle::from_ptr(stream))?;
        workspace.write(bound.workspace as *mut c_void);
        workspace_size.write(bound.workspace_size);
        handle_out(out, bound);
        Ok(())
    })
}

/// A `cusolverDnHandle_t` for `stream`'s device, the calling thread's, bound to
/// `stream` (cusolverDnSetStream).
///
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @param[out] handle receives a `cusolverDnHandle_t`, owned by gpurt; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_NOT_SUPPORTED, naming what was tried, where the library cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side: binds the handle to `stream` (the library's SetStream), enqueues nothing. The handle is for the calling thread; it is allowed during a capture.
#[no_mangle]
pub extern "C" fn gpurt_solver_handle(stream: gpurt_stream_t, handle: *mut *mut c_void) -> gpurt_status_t {
    stream_handle("gpurt_solver_handle", Library::Solver, stream, handle)
}

/// A `cusparseHandle_t` for `stream`'s device, the calling thread's, bound to
/// `stream` (cusparseSetStream).
///
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @param[out] handle receives a `cusparseHandle_t`, owned by gpurt; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_NOT_SUPPORTED, naming what was tried, where the library cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side: binds the handle to `stream` (the library's SetStream), enqueues nothing. The handle is for the calling thread; it is allowed during a capture.
#[no_mangle]
pub extern "C" fn gpurt_sparse_handle(stream: gpurt_stream_t, handle: *mut *mut c_void) -> gpurt_status_t {
    stream_handle("gpurt_sparse_handle", Library::Sparse, stream, handle)
}

/// A `cudnnHandle_t` for `stream`'s device, the calling thread's, bound to `stream`
/// (cudnnSetStream).
///
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @param[out] handle receives a `cudnnHandle_t`, owned by gpurt; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_NOT_SUPPORTED, naming what was tried, where the library cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side: binds the handle to `stream` (the library's SetStream), enqueues nothing. The handle is for the calling thread; it is allowed during a capture.
#[no_mangle]
pub extern "C" fn gpurt_dnn_handle(stream: gpurt_stream_t, handle: *mut *mut c_void) -> gpurt_status_t {
    stream_handle("gpurt_dnn_handle", Library::Dnn, stream, handle)
}

/// Whether cuBLAS may use TF32 tensor cores for fp32 GEMMs
/// (torch.backends.cuda.matmul.allow_tf32; default 0): the math mode of handles
/// given out from now on, and of cached ones when next given out.
///
/// @param allow non-zero allows TF32
/// @return GPURT_SUCCESS; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_blas_set_allow_tf32(allow: c_int) -> gpurt_status_t {
    boundary::call("gpurt_blas_set_allow_tf32", || {
        super::set_allow_tf32(allow != 0);
        Ok(())
    })
}

/// The setting of `gpurt_blas_set_allow_tf32`: 1 or 0.
///
/// @param[out] allow receives 1 or 0; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_blas_get_allow_tf32(allow: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_blas_get_allow_tf32", || {
        Out::new(allow, "allow")?.write(super::allow_tf32() as c_int);
        Ok(())
    })
}

/// Gives the workspaces of `device`'s cuBLAS and cuBLASLt handles that no thread
/// holds back to the device's pool (`GPURT_CURRENT_DEVICE`: the current device).
/// Handles that threads hold keep theirs.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side: the workspaces go back to gpurt's pool, in their streams' order.
#[no_mangle]
pub extern "C" fn gpurt_blas_clear_workspaces(device: c_int) -> gpurt_status_t {
    boundary::call("gpurt_blas_clear_workspaces", || super::clear_workspaces(crate::device::resolve(device)?))
}

/// `library`'s version as major × 10000 + minor × 100 + patch (cuBLAS 13.0.2:
/// 130002). `GPURT_ERROR_NOT_SUPPORTED`, naming what was tried, where it is missing.
///
/// @param library a gpurt_math_library_t
/// @param[out] version receives its version; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for an unknown library; GPURT_ERROR_NOT_SUPPORTED, naming what was tried, where the library cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_math_library_version(library: c_int, version: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_math_library_version", || {
        let out = Out::new(version, "version")?;
        out.write(super::version(self::library(library)?)?);
        Ok(())
    })
}

/// How many `library` handles gpurt has created on `device` (never more than the
/// threads that used one at once, until gpurt_blas_handles_release: the handles made
/// again after it count too) and how many are idle (held by no thread).
///
/// @param library a gpurt_math_library_t
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] created receives handles gpurt made on the device; may be NULL
/// @param[out] idle receives those no thread holds; may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for an unknown library; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_math_handle_counts(library: c_int, device: c_int, created: *mut usize, idle: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_math_handle_counts", || {
        let (created, idle) = (Out::new(created, "created")?, Out::new(idle, "idle")?);
        let (c, i) = super::counts(self::library(library)?, crate::device::resolve(device)?)?;
        created.write(c as usize);
        idle.write(i as usize);
        Ok(())
    })
}

/// Destroys every cuBLAS and cuBLASLt handle gpurt made on `device`, those threads
/// hold included, giving back the device memory the libraries keep per handle
/// (cuBLAS's own workspace pool, kept beside the workspace gpurt sets: 64 MiB a handle
/// on an H200) — before a gpurt_device_sleep, so that a sleeping process holds no
/// more than its context. Each thread's next gpurt_blas_handle or
/// gpurt_blaslt_handle gives a new handle with the math mode the old one had last
/// (whoever set it) and the same workspaces. A handle given out before this call
/// must not be used after it, and no thread may use one during it. cuSOLVER,
/// cuSPARSE and cuDNN handles stay. A failure leaves the handles destroyed before it
/// released and the others as they were; the call may be repeated.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @return GPURT_SUCCESS (also where cuBLAS was never loaded); GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_STREAM_CAPTURE while a capture begun through gpurt is in progress; GPURT_ERROR_CUDA where the library refuses to destroy a handle; or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocking: the libraries wait for the device as they destroy a handle.
#[no_mangle]
pub extern "C" fn gpurt_blas_handles_release(device: c_int) -> gpurt_status_t {
    boundary::call("gpurt_blas_handles_release", || super::release_blas(crate::device::resolve(device)?))
}
