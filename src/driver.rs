//! Loading the CUDA driver at run time and turning its results into `Error`s.
//!
//! cudarc resolves each driver function on first use and panics when the library
//! or the symbol is missing. gpurt never lets that happen: `init` checks that
//! libcuda loads and that every symbol in `REQUIRED` exists before any driver call,
//! and newer, optional entry points are probed with `has_symbol` first.

use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUresult};

use crate::error::{Error, Result, Status};

/// Entry points gpurt calls unconditionally: all exist since CUDA 11.4. The names are
/// the versioned ones cudarc loads.
const REQUIRED: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetUuid",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDeviceCanAccessPeer",
    "cuDevicePrimaryCtxRetain",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxGetDevice",
    "cuCtxSynchronize",
    "cuCtxEnablePeerAccess",
    "cuCtxDisablePeerAccess",
    "cuMemGetInfo_v2",
    "cuCtxGetStreamPriorityRange",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy_v2",
    "cuStreamQuery",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuStreamGetFlags",
    "cuStreamGetPriority",
    "cuStreamIsCapturing",
    "cuLaunchHostFunc",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventRecordWithFlags",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuIpcGetEventHandle",
    "cuIpcOpenEventHandle",
    "cuIpcGetMemHandle",
    "cuIpcOpenMemHandle_v2",
    "cuIpcCloseMemHandle",
    "cuMemAlloc_v2",
    "cuMemAllocManaged",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostGetDevicePointer_v2",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuMemcpyAsync",
    "cuMemcpyPeerAsync",
    "cuMemcpy2DAsync_v2",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuPointerGetAttribute",
    "cuPointerGetAttributes",
    "cuModuleLoadDataEx",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuFuncGetAttribute",
    "cuFuncSetAttribute",
    "cuLaunchKernel",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuStreamGetCaptureInfo_v2",
    "cuThreadExchangeStreamCaptureMode",
    "cuGraphInstantiateWithFlags",
    "cuGraphUpload",
    "cuGraphLaunch",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuGraphDebugDotPrint",
    "cuUserObjectCreate",
    "cuUserObjectRelease",
    "cuGraphRetainUserObject",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
    "cuMemGetAllocationGranularity",
    "cuMemRetainAllocationHandle",
    "cuMemExportToShareableHandle",
    "cuMemImportFromShareableHandle",
];

static INIT: OnceLock<Result<()>> = OnceLock::new();

/// Loads libcuda and initialises the driver once per process. Cheap after the
/// first call (one atomic load). Fails with `NO_DRIVER` where libcuda is absent,
/// `NOT_SUPPORTED` where it is too old, `NO_DEVICE` where it finds no GPU.
#[inline]
pub fn init() -> Result<()> {
    match INIT.get_or_init(load_and_init) {
        Ok(()) => Ok(()),
        Err(e) => Err(e.clone()),
    }
}

/// Whether the driver loaded and initialised; never fails.
pub fn is_initialized() -> bool {
    matches!(INIT.get(), Some(Ok(())))
}

fn load_and_init() -> Result<()> {
    if !library_present() {
        return Err(Error::new(
            Status::GPURT_ERROR_NO_DRIVER,
            "the CUDA driver library (libcuda.so.1) could not be loaded: no NVIDIA driver is installed, or it is not on the loader's path",
        ));
    }
    if let Some(missing) = REQUIRED.iter().find(|name| !has_symbol(name)) {
        return Err(Error::not_supported(format!(
            "the installed CUDA driver is too old: it lacks {missing} (gpurt needs CUDA 11.4 or newer)"
        )));
    }
    // SAFETY: symbols checked above.
    let code = unsafe { sys::cuInit(0) };
    check(code, "cuInit")?;
    crate::process::watch_forks();
    crate::log::log(crate::log::Level::Info, &format!("CUDA driver initialised, version {}", driver_version()?));
    Ok(())
}

/// Whether libcuda can be loaded; probed once.
fn library_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: is_culib_present only tries dlopen on the candidate names.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// Whether libcuda exports `name`. Loads nothing when the library is absent.
pub fn has_symbol(name: &str) -> bool {
    if !library_present() {
        return false;
    }
    // SAFETY: culib() is called only once the library is known to load.
    unsafe { sys::culib().get::<*const libc::c_void>(name.as_bytes()).is_ok() }
}

/// NOT_SUPPORTED, naming `symbol`, where libcuda lacks it: `what` needs it, and CUDA
/// has it from version `since` on.
pub fn require_symbol(symbol: &str, what: &str, since: &str) -> Result<()> {
    if has_symbol(symbol) {
        return Ok(());
    }
    Err(Error::not_supported(format!("{what} needs {symbol} (CUDA {since} or newer): this driver lacks it")))
}

/// The driver's CUDA version as 1000 * major + 10 * minor (12080 for 12.8).
pub fn driver_version() -> Result<i32> {
    let mut version = 0;
    // SAFETY: symbol checked by init's REQUIRED list; only called after the library loaded.
    check(unsafe { sys::cuDriverGetVersion(&mut version) }, "cuDriverGetVersion")?;
    Ok(version)
}

/// Function `entry` of a PTX image gpurt carries (NUL-terminated), loaded into the
/// current context; the module stays loaded for the process.
pub fn load_embedded(image: &str, entry: &std::ffi::CStr) -> Result<sys::CUfunction> {
    debug_assert!(image.ends_with('\0'), "a PTX image is NUL-terminated");
    let (mut module, mut function) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: a NUL-terminated image, no JIT options; the module outlives the function.
    check(unsafe { sys::cuModuleLoadDataEx(&mut module, image.as_ptr().cast(), 0, std::ptr::null_mut(), std::ptr::null_mut()) }, "cuModuleLoadDataEx")?;
    check(unsafe { sys::cuModuleGetFunction(&mut function, module, entry.as_ptr()) }, "cuModuleGetFunction")?;
    Ok(function)
}

/// `Ok` for `CUDA_SUCCESS`, otherwise an error naming `call`.
#[inline(always)]
pub fn check(code: CUresult, call: &str) -> Result<()> {
    if code == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(error(call, code))
    }
}

/// The error for a failed driver call `call`, with the driver's name and text of `code`.
#[cold]
pub fn error(call: &str, code: CUresult) -> Error {
    let (name, text) = error_name_and_text(code);
    Error::cuda(call, code, &name, &text)
}

/// The driver's name and description of `code`; placeholders where it has none.
pub fn error_name_and_text(code: CUresult) -> (String, String) {
    if !is_initialized() && !has_symbol("cuGetErrorName") {
        return (format!("CUresult {}", code as i32), "driver not loaded".into());
    }
    let read = |f: unsafe fn(CUresult, *mut *const libc::c_char) -> CUresult| {
        let mut ptr = std::ptr::null();
        // SAFETY: the driver returns a static string or an error.
        match unsafe { f(code, &mut ptr) } {
            CUresult::CUDA_SUCCESS if !ptr.is_null() => {
                Some(unsafe { std::ffi::CStr::from_ptr(ptr) }.to_string_lossy().into_owned())
            }
            _ => None,
        }
    };
    (
        read(sys::cuGetErrorName).unwrap_or_else(|| format!("CUresult {}", code as i32)),
        read(sys::cuGetErrorString).unwrap_or_else(|| "unknown error".into()),
    )
}
