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
pub type gpurt_module_t = *mut gpurt_module_s;

/// A kernel of a loaded module; invalid once the module is unloaded.
pub struct gpurt_kernel_s {
    _opaque: [u8; 0],
}
pub type gpurt_kernel_t = *mut gpurt_kernel_s;

/// Code compiled by NVRTC.
pub struct gpurt_program_s {
    _opaque: [u8; 0],
}
pub type gpurt_program_t = *mut gpurt_program_s;

/// One launch: grid and block shape, dynamic shared memory, stream, a thread block
/// cluster shape (zeros or ones: none), and programmatic dependent launch.
/// Initialise with GPURT_LAUNCH_CONFIG_INIT.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct gpurt_launch_config_t {
    pub struct_size: usize,
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared_memory_bytes: c_uint,
    pub stream: gpurt_stream_t,
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
#[no_mangle]
pub extern "C" fn gpurt_module_load_file(path: *const c_char, module: *mut gpurt_module_t) -> gpurt_status_t {
    boundary::call("gpurt_module_load_file", || {
        let out = Out::new(module, "module")?;
        out.write(super::load_file(in_str(path, "path")?)?.to_ptr());
        Ok(())
    })
}

/// Unloads a module; its kernel handles become invalid.
#[no_mangle]
pub extern "C" fn gpurt_module_unload(module: gpurt_module_t) -> gpurt_status_t {
    boundary::call("gpurt_module_unload", || super::unload(Handle::from_ptr(module)))
}

/// The kernel named `name` in `module` (the same handle every time).
#[no_mangle]
pub extern "C" fn gpurt_module_get_kernel(module: gpurt_module_t, name: *const c_char, kernel: *mut gpurt_kernel_t) -> gpurt_status_t {
    boundary::call("gpurt_module_get_kernel", || {
        let out = Out::new(kernel, "kernel")?;
        out.write(super::get_kernel(Handle::from_ptr(module), in_str(name, "name")?)?.to_ptr());
        Ok(())
    })
}

/// A kernel attribute (`GPURT_KERNEL_NUM_REGS`, `GPURT_KERNEL_MAX_THREADS_PER_BLOCK`, ...).
#[no_mangle]
pub extern "C" fn gpurt_kernel_get_attribute(kernel: gpurt_kernel_t, attribute: c_int, value: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_kernel_get_attribute", || {
        let out = Out::new(value, "value")?;
        out.write(super::get_attribute(Handle::from_ptr(kernel), attribute)?);
        Ok(())
    })
}

/// Allows launches of `kernel` with up to `bytes` of dynamic shared memory.
#[no_mangle]
pub extern "C" fn gpurt_kernel_set_max_dynamic_shared_memory(kernel: gpurt_kernel_t, bytes: c_int) -> gpurt_status_t {
    boundary::call("gpurt_kernel_set_max_dynamic_shared_memory", || {
        super::set_max_dynamic_shared_memory(Handle::from_ptr(kernel), bytes)
    })
}

/// Launches `kernel` on `stream`. `args` holds one pointer per kernel parameter, each
/// to the parameter's value (the cuLaunchKernel convention); NULL for none.
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
#[no_mangle]
pub extern "C" fn gpurt_launch_kernel_ex(kernel: gpurt_kernel_t, config: *const gpurt_launch_config_t, args: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_launch_kernel_ex", || {
        let (shape, stream) = launch_shape(config)?;
        // SAFETY: as in gpurt_launch_kernel.
        unsafe { super::launch(Handle::from_ptr(kernel), &shape, Handle::from_ptr(stream), args) }
    })
}

/// NVRTC's version; GPURT_ERROR_NOT_SUPPORTED where NVRTC cannot be loaded.
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
#[no_mangle]
pub extern "C" fn gpurt_rtc_program_log(program: gpurt_program_t, log: *mut *const c_char) -> gpurt_status_t {
    boundary::call("gpurt_rtc_program_log", || {
        let out = Out::new(log, "log")?;
        out.write(super::rtc::program(Handle::from_ptr(program))?.log.as_ptr());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn gpurt_rtc_program_destroy(program: gpurt_program_t) -> gpurt_status_t {
    boundary::call("gpurt_rtc_program_destroy", || super::rtc::destroy_program(Handle::from_ptr(program)))
}

/// The kernel `name` of `source` compiled for the current device: compiled, loaded
/// and looked up on first use, then a hash lookup. The handle stays valid until
/// gpurt_rtc_clear_cache.
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
#[no_mangle]
pub extern "C" fn gpurt_rtc_set_cache_dir(directory: *const c_char) -> gpurt_status_t {
    boundary::call("gpurt_rtc_set_cache_dir", || {
        let dir = if directory.is_null() { None } else { Some(in_str(directory, "directory")?) };
        super::rtc::set_cache_dir(dir)
    })
}

/// Empties the in-memory caches and unloads cached modules (their kernel handles
/// become invalid); the disk cache stays.
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
