//! Modules and kernels: loading PTX, cubin or fatbin images into a device's primary
//! context, looking kernels up by name, their attributes, and launches (with thread
//! block clusters where the device has them). `rtc` compiles CUDA C++ at run time;
//! `elementwise` builds kernels from short expressions.

pub mod elementwise;
pub mod ffi;
pub mod rtc;

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Mutex;

use cudarc::driver::sys;

use crate::boundary::lock;
use crate::device;
use crate::device::footprint::Footprint;
use crate::driver::{check, has_symbol};
use crate::error::{Error, Result, Status};
use crate::handle::{DeviceObject, Handle, HandleTable, Kind};

/// A loaded module, and a kernel of one (whose handle dies with the module).
type Module = DeviceObject;
type Kernel = DeviceObject;

fn function(k: Kernel) -> sys::CUfunction {
    k.raw as sys::CUfunction
}

static MODULES: HandleTable<Module> = HandleTable::new(Kind::Module);
static KERNELS: HandleTable<Kernel> = HandleTable::new(Kind::Kernel);
/// Each module's kernel handles by name: one handle per kernel (a repeated lookup
/// gives the same handle), all removed when the module is unloaded.
static KERNELS_OF: Mutex<Option<HashMap<u64, HashMap<String, Handle>>>> = Mutex::new(None);

/// What an image is, from its first bytes: an ELF cubin, a fatbin, or PTX text.
#[derive(Debug, PartialEq, Eq)]
pub enum ImageKind {
    Cubin,
    Fatbin,
    Ptx,
}

pub fn image_kind(image: &[u8]) -> ImageKind {
    match image {
        [0x7f, b'E', b'L', b'F', ..] => ImageKind::Cubin,
        [0x50, 0xed, 0x55, 0xba, ..] | [0xba, 0x55, 0xed, 0x50, ..] => ImageKind::Fatbin,
        _ => ImageKind::Ptx,
    }
}

/// PTX must reach the driver NUL-terminated; binary images go as they are.
fn driver_image(image: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>> {
    if image.is_empty() {
        return Err(Error::invalid_argument("the module image is empty"));
    }
    if image_kind(image) != ImageKind::Ptx || image.last() == Some(&0) {
        return Ok(image.into());
    }
    let mut text = crate::boundary::try_copy(image, 1)?;
    text.push(0);
    Ok(text.into())
}

/// Loads an image into the current device's context. PTX is compiled by the driver;
/// its error log becomes the message when that fails.
pub fn load_data(image: &[u8]) -> Result<Handle> {
    let device = device::current()?;
    let image = driver_image(image)?;
    let mut log = vec![0u8; 16 << 10];
    let raw = device::footprint::measured(&[device], Footprint::Modules, || device::with_device(device, || {
        let mut module = std::ptr::null_mut();
        let mut options = [sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER, sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        let mut values = [log.as_mut_ptr().cast(), log.len() as *mut libc::c_void];
        let code = unsafe {
            sys::cuModuleLoadDataEx(&mut module, image.as_ptr().cast(), 2, options.as_mut_ptr(), values.as_mut_ptr())
        };
        check(code, "cuModuleLoadDataEx").map_err(|e| with_jit_log(e, &log))?;
        Ok(module as usize)
    }))?;
    MODULES.insert(Module { raw, device }).inspect_err(|_| unsafe {
        sys::cuModuleUnload(raw as sys::CUmodule);
    })
}

fn with_jit_log(e: Error, log: &[u8]) -> Error {
    let text = String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(log.len())]).trim().to_string();
    if text.is_empty() {
        return e;
    }
    Error::new(e.status, format!("{}; JIT log: {text}", e.message))
}

pub fn load_file(path: &str) -> Result<Handle> {
    let image = std::fs::read(path).map_err(|e| Error::invalid_argument(format!("reading module file {path:?}: {e}")))?;
    load_data(&image)
}

/// Unloads a module; its kernel handles become invalid.
pub fn unload(handle: Handle) -> Result<()> {
    let module = MODULES.remove(handle)?;
    if let Some(kernels) = lock(&KERNELS_OF).as_mut().and_then(|m| m.remove(&handle.0)) {
        kernels.into_values().for_each(|k| drop(KERNELS.remove(k)));
    }
    device::with_device(module.device, || {
        check(unsafe { sys::cuModuleUnload(module.raw as sys::CUmodule) }, "cuModuleUnload")
    })
}

/// The kernel `name` (an `extern "C"` or mangled name) of a module.
pub fn get_kernel(module: Handle, name: &str) -> Result<Handle> {
    let m = MODULES.get(module)?;
    let mut registry = lock(&KERNELS_OF);
    let kernels = registry.get_or_insert_with(HashMap::new).entry(module.0).or_default();
    if let Some(&k) = kernels.get(name) {
        return Ok(k);
    }
    let cname = CString::new(name).map_err(|_| Error::invalid_argument("the kernel name contains a NUL byte"))?;
    let mut raw = std::ptr::null_mut();
    let code = unsafe { sys::cuModuleGetFunction(&mut raw, m.raw as sys::CUmodule, cname.as_ptr()) };
    if code == sys::CUresult::CUDA_ERROR_NOT_FOUND {
        return Err(Error::invalid_argument(format!("the module has no kernel named {name:?} (C++ names are mangled unless declared extern \"C\")")));
    }
    check(code, "cuModuleGetFunction")?;
    let handle = KERNELS.insert(Kernel { raw: raw as usize, device: m.device })?;
    kernels.insert(name.to_string(), handle);
    Ok(handle)
}

pub fn kernel_device(kernel: Handle) -> Result<i32> {
    Ok(KERNELS.get(kernel)?.device)
}

// Kernel attributes: the values of CUDA's CUfunction_attribute.
/// Kernel attribute: the most threads per block a launch of the kernel may have.
pub const GPURT_KERNEL_MAX_THREADS_PER_BLOCK: i32 = 0;
/// Kernel attribute: its static shared memory per block, in bytes.
pub const GPURT_KERNEL_SHARED_SIZE_BYTES: i32 = 1;
/// Kernel attribute: its constant memory, in bytes.
pub const GPURT_KERNEL_CONST_SIZE_BYTES: i32 = 2;
/// Kernel attribute: its local memory per thread, in bytes.
pub const GPURT_KERNEL_LOCAL_SIZE_BYTES: i32 = 3;
/// Kernel attribute: registers per thread.
pub const GPURT_KERNEL_NUM_REGS: i32 = 4;
/// Kernel attribute: the PTX virtual architecture it was compiled for (major × 10 + minor).
pub const GPURT_KERNEL_PTX_VERSION: i32 = 5;
/// Kernel attribute: the binary architecture it was compiled for (major × 10 + minor).
pub const GPURT_KERNEL_BINARY_VERSION: i32 = 6;
/// Kernel attribute: the most dynamic shared memory a launch may ask (gpurt_kernel_set_max_dynamic_shared_memory).
pub const GPURT_KERNEL_MAX_DYNAMIC_SHARED_SIZE_BYTES: i32 = 8;

fn attribute(which: i32) -> Result<sys::CUfunction_attribute> {
    use sys::CUfunction_attribute::*;
    Ok(match which {
        GPURT_KERNEL_MAX_THREADS_PER_BLOCK => CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        GPURT_KERNEL_SHARED_SIZE_BYTES => CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
        GPURT_KERNEL_CONST_SIZE_BYTES => CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES,
        GPURT_KERNEL_LOCAL_SIZE_BYTES => CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
        GPURT_KERNEL_NUM_REGS => CU_FUNC_ATTRIBUTE_NUM_REGS,
        GPURT_KERNEL_PTX_VERSION => CU_FUNC_ATTRIBUTE_PTX_VERSION,
        GPURT_KERNEL_BINARY_VERSION => CU_FUNC_ATTRIBUTE_BINARY_VERSION,
        GPURT_KERNEL_MAX_DYNAMIC_SHARED_SIZE_BYTES => CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        other => return Err(Error::invalid_argument(format!("unknown kernel attribute {other}"))),
    })
}

pub fn get_attribute(kernel: Handle, which: i32) -> Result<i32> {
    let (k, attr) = (KERNELS.get(kernel)?, attribute(which)?);
    let mut value = 0;
    check(unsafe { sys::cuFuncGetAttribute(&mut value, attr, function(k)) }, "cuFuncGetAttribute")?;
    Ok(value)
}

/// Allows launches with up to `bytes` of dynamic shared memory (above 48 KiB needs it).
pub fn set_max_dynamic_shared_memory(kernel: Handle, bytes: i32) -> Result<()> {
    let k = KERNELS.get(kernel)?;
    if bytes < 0 {
        return Err(Error::invalid_argument(format!("dynamic shared memory of {bytes} bytes")));
    }
    let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    check(unsafe { sys::cuFuncSetAttribute(function(k), attr, bytes) }, "cuFuncSetAttribute")
}

/// Grid, block, dynamic shared memory and cluster shape of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchShape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    /// `[0, 0, 0]` or `[1, 1, 1]`: no cluster.
    pub cluster: [u32; 3],
    /// Programmatic dependent launch: may start before the stream's previous kernel ends.
    pub programmatic: bool,
}

impl LaunchShape {
    /// A launch of `grid` blocks of `block` threads, nothing more.
    pub const fn plain(grid: [u32; 3], block: [u32; 3]) -> LaunchShape {
        LaunchShape { grid, block, shared_bytes: 0, cluster: [0, 0, 0], programmatic: false }
    }

    /// Checks what the driver would reject with a less helpful message.
    pub fn validate(&self) -> Result<()> {
        if self.grid.contains(&0) || self.block.contains(&0) {
            return Err(Error::invalid_argument(format!("grid {:?} and block {:?} need every dimension ≥ 1", self.grid, self.block)));
        }
        let threads = self.block.iter().map(|&b| b as u64).product::<u64>();
        if threads > 1024 {
            return Err(Error::invalid_argument(format!("a block of {threads} threads exceeds 1024")));
        }
        if self.has_cluster() {
            if self.cluster.contains(&0) {
                return Err(Error::invalid_argument(format!("cluster {:?} needs every dimension ≥ 1", self.cluster)));
            }
            if (0..3).any(|i| self.grid[i] % self.cluster[i] != 0) {
                return Err(Error::invalid_argument(format!(
                    "grid {:?} is not a multiple of cluster {:?}",
                    self.grid, self.cluster
                )));
            }
        }
        Ok(())
    }
    pub fn has_cluster(&self) -> bool {
        self.cluster != [0, 0, 0] && self.cluster != [1, 1, 1]
    }
}

/// Launches `kernel` on `stream`; `args` points to one pointer per kernel parameter,
/// each to the parameter's value (the `cuLaunchKernel` convention).
///
/// # Safety
/// `args` must be NULL for a kernel without parameters, or hold one valid pointer
/// per parameter, each to a value of the parameter's type.
pub unsafe fn launch(kernel: Handle, shape: &LaunchShape, stream: Handle, args: *mut *mut libc::c_void) -> Result<()> {
    let k = KERNELS.get(kernel)?;
    let s = crate::stream::get(stream)?;
    shape.validate()?;
    if k.device != s.device() {
        return Err(Error::invalid_argument(format!(
            "the kernel was loaded on device {} and the stream belongs to device {}",
            k.device,
            s.device()
        )));
    }
    let [gx, gy, gz] = shape.grid;
    let [bx, by, bz] = shape.block;
    if !shape.has_cluster() && !shape.programmatic {
        return s.run(|cu| {
            let code = unsafe { sys::cuLaunchKernel(function(k), gx, gy, gz, bx, by, bz, shape.shared_bytes, cu, args, std::ptr::null_mut()) };
            check(code, "cuLaunchKernel")
        });
    }
    if !has_symbol("cuLaunchKernelEx") {
        return Err(Error::new(Status::GPURT_ERROR_NOT_SUPPORTED, "clusters and programmatic dependent launch need CUDA 12's cuLaunchKernelEx"));
    }
    // SAFETY (both): a launch attribute is plain data; zeroed is "no value".
    let mut attrs: [sys::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
    let mut count = 0;
    if shape.has_cluster() {
        if device::attribute(k.device, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH)? == 0 {
            return Err(Error::new(Status::GPURT_ERROR_NOT_SUPPORTED, "thread block clusters need compute capability 9.0 and CUDA 12"));
        }
        let [cx, cy, cz] = shape.cluster;
        attrs[count].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attrs[count].value.clusterDim.x = cx;
        attrs[count].value.clusterDim.y = cy;
        attrs[count].value.clusterDim.z = cz;
        count += 1;
    }
    if shape.programmatic {
        attrs[count].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attrs[count].value.programmaticStreamSerializationAllowed = 1;
        count += 1;
    }
    s.run(|cu| {
        let config = sys::CUlaunchConfig {
            gridDimX: gx,
            gridDimY: gy,
            gridDimZ: gz,
            blockDimX: bx,
            blockDimY: by,
            blockDimZ: bz,
            sharedMemBytes: shape.shared_bytes,
            hStream: cu,
            attrs: attrs.as_mut_ptr(),
            numAttrs: count as u32,
        };
        check(unsafe { sys::cuLaunchKernelEx(&config, function(k), args, std::ptr::null_mut()) }, "cuLaunchKernelEx")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_told_apart_by_their_first_bytes() {
        assert_eq!(image_kind(b"\x7fELF\x02\x01"), ImageKind::Cubin);
        assert_eq!(image_kind(&[0x50, 0xed, 0x55, 0xba, 1, 0]), ImageKind::Fatbin);
        assert_eq!(image_kind(b".version 8.0\n.target sm_90"), ImageKind::Ptx);
        assert_eq!(&*driver_image(b".version 8.0").unwrap(), b".version 8.0\0", "PTX gets its NUL");
        assert_eq!(&*driver_image(b"\x7fELF").unwrap(), b"\x7fELF", "binaries go as they are");
        assert_eq!(driver_image(b"").unwrap_err().status, Status::GPURT_ERROR_INVALID_ARGUMENT);
    }

    #[test]
    fn launch_shapes_are_checked_before_the_driver() {
        let ok = LaunchShape::plain([8, 2, 1], [256, 1, 1]);
        assert!(ok.validate().is_ok() && !ok.has_cluster());
        assert!(LaunchShape { grid: [0, 1, 1], ..ok }.validate().is_err());
        assert!(LaunchShape { block: [32, 32, 2], ..ok }.validate().unwrap_err().message.contains("2048"));
        let clustered = LaunchShape { cluster: [2, 1, 1], ..ok };
        assert!(clustered.has_cluster() && clustered.validate().is_ok());
        assert!(LaunchShape { cluster: [3, 1, 1], ..ok }.validate().unwrap_err().message.contains("multiple"));
        assert!(LaunchShape { cluster: [2, 0, 1], ..ok }.validate().is_err());
        assert!(!LaunchShape { cluster: [1, 1, 1], ..ok }.has_cluster());
    }
}
