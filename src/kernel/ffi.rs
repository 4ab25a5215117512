use libc::{c_char, c_int, c_uint, c_void};

use super::elementwise::gpurt_dtype_t;
use crate::boundary::{self, in_ref, in_str, Out};
use crate::error::{gpurt_status_t, Result};
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// A module (PTX, cubin or fatbin) loaded on one device.
pub struct gpurt_module_s {
    _opaque: [u8; 0],
}
/// The handle of a loaded module: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_module_t = *mut gpurt_module_s;

/// A kernel of a loaded module; invalid once the module is unloaded.
pub struct gpurt_kernel_s {
    _opaque: [u8; 0],
}
/// The handle of a kernel of a module: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_kernel_t = *mut gpurt_kernel_s;

/// Code compiled by NVRTC.
pub struct gpurt_program_s {
    _opaque: [u8; 0],
}
/// The handle of a program compiled by NVRTC: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_program_t = *mut gpurt_program_s;

/// One launch: grid and block shape, dynamic shared memory, stream, a thread block
/// cluster shape (zeros or ones: none), and programmatic dependent launch.
/// Initialise with GPURT_LAUNCH_CONFIG_INIT.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct gpurt_launch_config_t {
    /// Set by the caller to sizeof the struct it was compiled with (the _INIT macro does): gpurt fills only that much.
    pub struct_size: usize,
    /// Blocks in x, y and z.
    pub grid: [c_uint; 3],
    /// Threads per block in x, y and z.
    pub block: [c_uint; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_memory_bytes: c_uint,
    /// The stream the launch is ordered on.
    pub stream: gpurt_stream_t,
    /// Blocks per cluster in x, y and z; all 0: no clusters.
    pub cluster: [c_uint; 3],
    /// 1: the kernel may start before the stream's previous kernel has finished
    /// (CUDA's programmatic dependent launch, compute capability 9.0): its threads
    /// run `griddepcontrol.wait` (cudaGridDependencySynchronize) before they touch
    /// what the previous kernel writes, and the previous kernel may let it start
    /// early with `griddepcontrol.launch_dependents`. Captured into graphs as a
    /// programmatic edge. 0 (and a struct from before this field): an ordinary launch.
    pub programmatic_dependent_launch: c_uint,
}

/// The launch shape and stream `config` describes, read as the caller's version of
/// the struct: one from before `programmatic_dependent_launch` (a smaller
/// `struct_size`) reads as 0 there.
pub(crate) fn launch_shape(config: *const gpurt_launch_config_t) -> crate::Result<(super::LaunchShape, gpurt_stream_t)> {
    const EVERY_VERSION: usize = std::mem::offset_of!(gpurt_launch_config_t, programmatic_dependent_launch);
    // SAFETY: the config is integers and a stream handle; zero is "none" for each.
    let c = unsafe { boundary::in_extended(config, EVERY_VERSION, "config", "GPURT_LAUNCH_CONFIG_INIT") }?;
    if c.programmatic_dependent_launch > 1 {
        return Err(crate::Error::invalid_argument("`config->programmatic_dependent_launch` is 0 or 1"));
    }
    let shape = super::LaunchShape {
        grid: c.grid,
        block: c.block,
        shared_bytes: c.shared_memory_bytes,
        cluster: c.cluster,
        programmatic: c.programmatic_dependent_launch == 1,
    };
    Ok((shape, c.stream))
}

/// Loads a module image (PTX text, cubin or fatbin; `size` bytes) on the current
/// device. A PTX error's JIT log is in the message.
///
/// @param image PTX text (NUL-terminated), a cubin or a fatbin
/// @param size the image's bytes
/// @param[out] module receives the loaded module; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a NULL image; an error with the JIT log where the image does not load; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_module_load_data(image: *const c_void, size: usize, module: *mut gpurt_module_t) -> gpurt_status_t {
    boundary::call("gpurt_module_load_data", || {
        let out = Out::new(module, "module")?;
        in_ref(image.cast::<u8>(), "image")?;
        out.write(super::load_data(boundary::in_bytes(image, size, "image")?)?.to_ptr());
        Ok(())
    })
}

/// Loads a module from a file on the current device.
///
/// @param path a PTX, cubin or fatbin file
/// @param[out] module receives the loaded module; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a NULL `path`; an error where the file does not load; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_module_load_file(path: *const c_char, module: *mut gpurt_module_t) -> gpurt_status_t {
    boundary::call("gpurt_module_load_file", || {
        let out = Out::new(module, "module")?;
        out.write(super::load_file(in_str(path, "path")?)?.to_ptr());
        Ok(())
    })
}

/// Unloads a module; its kernel handles become invalid.
///
/// @param module a loaded module
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `module`; or a status every call may give (@ref statuses).
/// @par Ordering
/// The module must not be in use by queued work: unloading does not wait for it.
#[no_mangle]
pub extern "C" fn gpurt_module_unload(module: gpurt_module_t) -> gpurt_status_t {
    boundary::call("gpurt_module_unload", || super::unload(Handle::from_ptr(module)))
}

/// The kernel named `name` in `module` (the same handle every time).
///
/// @param module a loaded module
/// @param name the kernel's (extern "C" or mangled) name
/// @param[out] kernel receives the kernel; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `module`; an error where the module has no such kernel; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_module_get_kernel(module: gpurt_module_t, name: *const c_char, kernel: *mut gpurt_kernel_t) -> gpurt_status_t {
    boundary::call("gpurt_module_get_kernel", || {
        let out = Out::new(kernel, "kernel")?;
        out.write(super::get_kernel(Handle::from_ptr(module), in_str(name, "name")?)?.to_ptr());
        Ok(())
    })
}

/// A kernel attribute (`GPURT_KERNEL_NUM_REGS`, `GPURT_KERNEL_MAX_THREADS_PER_BLOCK`, ...).
///
/// @param kernel a kernel
/// @param attribute a GPURT_KERNEL_* attribute
/// @param[out] value receives its value; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `kernel`; GPURT_ERROR_INVALID_ARGUMENT for an unknown attribute; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_kernel_get_attribute(kernel: gpurt_kernel_t, attribute: c_int, value: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_kernel_get_attribute", || {
        let out = Out::new(value, "value")?;
        out.write(super::get_attribute(Handle::from_ptr(kernel), attribute)?);
        Ok(())
    })
}

/// Allows launches of `kernel` with up to `bytes` of dynamic shared memory.
///
/// @param kernel a kernel
/// @param bytes the most dynamic shared memory a launch may ask
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `kernel`; an error above the device's limit; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_kernel_set_max_dynamic_shared_memory(kernel: gpurt_kernel_t, bytes: c_int) -> gpurt_status_t {
    boundary::call("gpurt_kernel_set_max_dynamic_shared_memory", || {
        super::set_max_dynamic_shared_memory(Handle::from_ptr(kernel), bytes)
    })
}

/// Launches `kernel` on `stream`. `args` holds one pointer per kernel parameter, each
/// to the parameter's value (the cuLaunchKernel convention); NULL for none.
///
/// @param kernel a kernel
/// @param grid_x blocks in x
/// @param grid_y blocks in y
/// @param grid_z blocks in z
/// @param block_x threads per block in x
/// @param block_y threads per block in y
/// @param block_z threads per block in z
/// @param shared_memory_bytes dynamic shared memory per block
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @param args one pointer per kernel parameter, each to its value; NULL for a kernel without parameters
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `kernel` or `stream`; an error from the driver for a configuration the kernel cannot run with; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead.
#[no_mangle]
pub extern "C" fn gpurt_launch_kernel(
    kernel: gpurt_kernel_t,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_memory_bytes: c_uint,
    stream: gpurt_stream_t,
    args: *mut *mut c_void,
) -> gpurt_status_t {
    boundary::call("gpurt_launch_kernel", || {
        let shape = super::LaunchShape { shared_bytes: shared_memory_bytes, ..super::LaunchShape::plain([grid_x, grid_y, grid_z], [block_x, block_y, block_z]) };
        // SAFETY: the caller's contract for `args` is cuLaunchKernel's.
        unsafe { super::launch(Handle::from_ptr(kernel), &shape, Handle::from_ptr(stream), args) }
    })
}

/// Launches `kernel` as `config` describes, with thread block clusters where given
/// (GPURT_ERROR_NOT_SUPPORTED on devices without them) and programmatic dependent
/// launch where asked (GPURT_ERROR_NOT_SUPPORTED on a driver without cuLaunchKernelEx).
///
/// @param kernel a kernel
/// @param config grid, block, shared memory, stream, clusters and programmatic dependent launch (initialise with GPURT_LAUNCH_CONFIG_INIT)
/// @param args one pointer per kernel parameter, each to its value
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if `config` is NULL or too small; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `kernel` or `config->stream`; GPURT_ERROR_NOT_SUPPORTED for clusters or programmatic dependent launch where the device or driver lacks them; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `config->stream`; returns without waiting for the device. While `config->stream` is being captured, the work is recorded into the graph instead.
#[no_mangle]
pub extern "C" fn gpurt_launch_kernel_ex(kernel: gpurt_kernel_t, config: *const gpurt_launch_config_t, args: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_launch_kernel_ex", || {
        let (shape, stream) = launch_shape(config)?;
        // SAFETY: as in gpurt_launch_kernel.
        unsafe { super::launch(Handle::from_ptr(kernel), &shape, Handle::from_ptr(stream), args) }
    })
}

/// NVRTC's version; GPURT_ERROR_NOT_SUPPORTED where NVRTC cannot be loaded.
///
/// @param[out] major receives NVRTC's major version; must not be NULL
/// @param[out] minor receives its minor version; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_NOT_SUPPORTED where NVRTC cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_rtc_version(major: *mut c_int, minor: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_rtc_version", || {
        let (major, minor) = (Out::new(major, "major")?, Out::new(minor, "minor")?);
        let (a, b) = super::rtc::version()?;
        major.write(a);
        minor.write(b);
        Ok(())
    })
}

/// The architectures run-time compilation targets (torch.cuda.get_arch_list), as
/// compute capability × 10: up to `capacity` into `archs` (NULL when `capacity` is
/// 0), their number into `count`. GPURT_ERROR_NOT_SUPPORTED without NVRTC.
///
/// @param archs receives up to `capacity` architectures (compute capability × 10); may be NULL when `capacity` is 0
/// @param capacity entries `archs` holds
/// @param[out] count receives how many architectures there are; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_NOT_SUPPORTED where NVRTC cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_arch_list(archs: *mut c_int, capacity: usize, count: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_arch_list", || {
        let out = boundary::ListOut::new(archs, capacity, count, "archs")?;
        out.write(&super::rtc::supported_archs()?);
        Ok(())
    })
}

/// More options than any NVRTC command line needs: a larger count is a bug, refused
/// before the caller's array is read.
pub const GPURT_RTC_MAX_OPTIONS: usize = 1024;

/// `count` C strings (NULL for none), at most `max`: in `stack` when they fit, else
/// in `heap`, so that the usual few allocate nothing.
fn strings<'a, const N: usize>(
    list: *const *const c_char,
    count: usize,
    max: usize,
    name: &str,
    stack: &'a mut [&'a str; N],
    heap: &'a mut Vec<&'a str>,
) -> Result<&'a [&'a str]> {
    let pointers = boundary::in_array(list, count, max, name)?;
    let slots = boundary::slots(pointers.len(), "", stack, heap);
    for (slot, &p) in slots.iter_mut().zip(pointers) {
        *slot = in_str(p, name)?;
    }
    Ok(slots)
}

/// Compiles CUDA C++ `source` with NVRTC options (the current device's architecture
/// unless an `-arch` option names one), or finds it in the cache. A compile error is
/// GPURT_ERROR_COMPILATION with NVRTC's log as the message.
///
/// @param source CUDA C++ source, NUL-terminated
/// @param options `num_options` NVRTC options; may be NULL when `num_options` is 0
/// @param num_options how many options (at most GPURT_RTC_MAX_OPTIONS)
/// @param[out] program receives the compiled program; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a NULL `source`, a NULL option, or too many options; GPURT_ERROR_NOT_SUPPORTED where NVRTC cannot be loaded; GPURT_ERROR_COMPILATION with NVRTC's log as the message; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_rtc_compile(
    source: *const c_char,
    options: *const *const c_char,
    num_options: usize,
    program: *mut gpurt_program_t,
) -> gpurt_status_t {
    boundary::call("gpurt_rtc_compile", || {
        let out = Out::new(program, "program")?;
        let (mut stack, mut heap) = ([""; 8], Vec::new());
        let options = strings(options, num_options, GPURT_RTC_MAX_OPTIONS, "options", &mut stack, &mut heap)?;
        let options: Vec<String> = options.iter().map(|s| s.to_string()).collect();
        out.write(super::rtc::create_program(in_str(source, "source")?, &options)?.to_ptr());
        Ok(())
    })
}

/// The compiled code (valid until the program is destroyed): cubin when
/// `*is_cubin` is 1, else NUL-terminated PTX. Load it with gpurt_module_load_data.
///
/// @param program a program from gpurt_rtc_compile
/// @param[out] code receives the code, valid until the program is destroyed; must not be NULL
/// @param[out] size receives its bytes; must not be NULL
/// @param[out] is_cubin receives 1 for cubin, 0 for PTX; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `program`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_rtc_program_code(
    program: gpurt_program_t,
    code: *mut *const c_void,
    size: *mut usize,
    is_cubin: *mut c_int,
) -> gpurt_status_t {
    boundary::call("gpurt_rtc_program_code", || {
        let (code, size, is_cubin) = (Out::new(code, "code")?, Out::new(size, "size")?, Out::new(is_cubin, "is_cubin")?);
        let p = super::rtc::program(Handle::from_ptr(program))?;
        code.write(p.code.as_ptr().cast());
        size.write(p.code.len());
        is_cubin.write(p.is_cubin as c_int);
        Ok(())
    })
}

/// The compiler's warnings, NUL-terminated (valid until the program is destroyed).
///
/// @param program a program from gpurt_rtc_compile
/// @param[out] log receives the compiler's log, NUL-terminated, valid until the program is destroyed; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `program`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_rtc_program_log(program: gpurt_program_t, log: *mut *const c_char) -> gpurt_status_t {
    boundary::call("gpurt_rtc_program_log", || {
        let out = Out::new(log, "log")?;
        out.write(super::rtc::program(Handle::from_ptr(program))?.log.as_ptr());
        Ok(())
    })
}

/// Destroys a program and its code.
/// @param program a program from gpurt_rtc_compile
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `program`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_rtc_program_destroy(program: gpurt_program_t) -> gpurt_status_t {
    boundary::call("gpurt_rtc_program_destroy", || super::rtc::destroy_program(Handle::from_ptr(program)))
}

/// The kernel `name` of `source` compiled for the current device: compiled, loaded
/// and looked up on first use, then a hash lookup. The handle stays valid until
/// gpurt_rtc_clear_cache.
///
/// @param source CUDA C++ source
/// @param name the kernel's name in it
/// @param options `num_options` NVRTC options; may be NULL when `num_options` is 0
/// @param num_options how many options
/// @param[out] kernel receives the kernel, valid until gpurt_rtc_clear_cache; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for NULL strings or too many options; GPURT_ERROR_NOT_SUPPORTED where NVRTC cannot be loaded; GPURT_ERROR_COMPILATION with NVRTC's log; an error where the source has no such kernel; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_rtc_get_kernel(
    source: *const c_char,
    name: *const c_char,
    options: *const *const c_char,
    num_options: usize,
    kernel: *mut gpurt_kernel_t,
) -> gpurt_status_t {
    boundary::call("gpurt_rtc_get_kernel", || {
        let out = Out::new(kernel, "kernel")?;
        let (mut stack, mut heap) = ([""; 8], Vec::new());
        let options = strings(options, num_options, GPURT_RTC_MAX_OPTIONS, "options", &mut stack, &mut heap)?;
        out.write(super::rtc::get_kernel(in_str(source, "source")?, options, in_str(name, "name")?)?.to_ptr());
        Ok(())
    })
}

/// Keeps compiled code in `directory` across processes too (NULL: memory only). The
/// default is the GPURT_RTC_CACHE_DIR environment variable.
///
/// @param directory the disk cache's directory, created 0700 where missing; NULL: memory only
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a directory of another user or one its group or others may write (SECURITY.md), or one that cannot be created; the cache is left as it was; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_rtc_set_cache_dir(directory: *const c_char) -> gpurt_status_t {
    boundary::call("gpurt_rtc_set_cache_dir", || {
        let dir = if directory.is_null() { None } else { Some(in_str(directory, "directory")?) };
        super::rtc::set_cache_dir(dir)
    })
}

/// Empties the in-memory caches and unloads cached modules (their kernel handles
/// become invalid); the disk cache stays.
///
/// @return GPURT_SUCCESS; or a status every call may give (@ref statuses).
/// @par Ordering
/// Unloads cached modules: no queued work may still use their kernels.
#[no_mangle]
pub extern "C" fn gpurt_rtc_clear_cache() -> gpurt_status_t {
    boundary::call("gpurt_rtc_clear_cache", super::rtc::clear_cache)
}

/// The most inputs of one elementwise kernel: each is a pointer parameter, and a
/// kernel's parameters must fit 4 KiB on every supported driver.
pub const GPURT_ELEMENTWISE_MAX_INPUTS: usize = 256;

/// Computes `expression` (such as "out = a * b + c") elementwise over `count`
/// elements: `inputs[i]` is the device array named `input_names[i]`, all of `dtype`
/// (a gpurt_dtype_t), and the result goes to `output`, on `stream`. Half and
/// bfloat16 are computed in float. Compiled once per expression, names, dtype and
/// device.
///
/// @param expression an assignment to `out` over the inputs' names, in CUDA C++
/// @param input_names `num_inputs` identifiers
/// @param inputs `num_inputs` device arrays of `count` elements each
/// @param num_inputs how many inputs (at most GPURT_ELEMENTWISE_MAX_INPUTS)
/// @param dtype every array's gpurt_dtype_t
/// @param count elements; 0 does nothing
/// @param output the device array of `count` elements the result goes to
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for NULL arrays or names, bad identifiers, too many inputs or an unknown dtype; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_NOT_SUPPORTED where NVRTC cannot be loaded; GPURT_ERROR_COMPILATION for an expression that does not compile, with NVRTC's log; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. A repeated call costs a hash lookup and a launch; the first call for an expression compiles it (NVRTC) on the calling thread.
#[no_mangle]
pub extern "C" fn gpurt_elementwise(
    expression: *const c_char,
    input_names: *const *const c_char,
    inputs: *const *const c_void,
    num_inputs: usize,
    dtype: c_int,
    count: usize,
    output: *mut c_void,
    stream: gpurt_stream_t,
) -> gpurt_status_t {
    boundary::call("gpurt_elementwise", || {
        elementwise(expression, input_names, inputs, num_inputs, dtype, count, &[output as u64], stream)
    })
}

/// As gpurt_elementwise, with several outputs from one kernel (jiterator's
/// multi-output functions): `statements` such as "s = a + b; d = s * c" write
/// `outputs[0]`, `outputs[1]`... in order, and a statement may use the outputs
/// computed before it. `num_outputs` must match the statements.
///
/// @param statements assignments separated by `;`, one per output, in order
/// @param input_names `num_inputs` identifiers
/// @param inputs `num_inputs` device arrays
/// @param num_inputs how many inputs
/// @param dtype every array's gpurt_dtype_t
/// @param count elements; 0 does nothing
/// @param outputs `num_outputs` device arrays the results go to
/// @param num_outputs how many outputs; must match the statements
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for NULL arrays, bad identifiers, an output count that does not match the statements or an unknown dtype; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_NOT_SUPPORTED where NVRTC cannot be loaded; GPURT_ERROR_COMPILATION with NVRTC's log; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. A repeated call costs a hash lookup and a launch; the first call for an expression compiles it (NVRTC) on the calling thread.
#[no_mangle]
pub extern "C" fn gpurt_elementwise_multi(
    statements: *const c_char,
    input_names: *const *const c_char,
    inputs: *const *const c_void,
    num_inputs: usize,
    dtype: c_int,
    count: usize,
    outputs: *const *mut c_void,
    num_outputs: usize,
    stream: gpurt_stream_t,
) -> gpurt_status_t {
    boundary::call("gpurt_elementwise_multi", || {
        in_ref(outputs, "outputs")?;
        let outputs: Vec<u64> = boundary::in_array(outputs, num_outputs, GPURT_ELEMENTWISE_MAX_INPUTS, "outputs")?.iter().map(|&p| p as u64).collect();
        elementwise(statements, input_names, inputs, num_inputs, dtype, count, &outputs, stream)
    })
}

/// The arguments both elementwise calls share, checked and passed on.
#[allow(clippy::too_many_arguments)]
fn elementwise(
    statements: *const c_char,
    input_names: *const *const c_char,
    inputs: *const *const c_void,
    num_inputs: usize,
    dtype: c_int,
    count: usize,
    outputs: &[u64],
    stream: gpurt_stream_t,
) -> crate::Result<()> {
    let (mut name_stack, mut name_heap) = ([""; 8], Vec::new());
    let names = strings(input_names, num_inputs, GPURT_ELEMENTWISE_MAX_INPUTS, "input_names", &mut name_stack, &mut name_heap)?;
    in_ref(inputs, "inputs")?;
    let input_ptrs = boundary::in_array(inputs, num_inputs, GPURT_ELEMENTWISE_MAX_INPUTS, "inputs")?;
    let (mut pointer_stack, mut pointer_heap) = ([0u64; 8], Vec::new());
    let pointers = boundary::slots(input_ptrs.len(), 0, &mut pointer_stack, &mut pointer_heap);
    pointers.iter_mut().zip(input_ptrs).for_each(|(p, &q)| *p = q as u64);
    let dtype = gpurt_dtype_t::from_raw(dtype)?;
    let statements = in_str(statements, "expression")?;
    super::elementwise::launch(statements, names, dtype, count as u64, pointers, outputs, Handle::from_ptr(stream))
}
