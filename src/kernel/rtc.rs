//! Run-time compilation with NVRTC, loaded on first use (its absence is "not
//! supported", never a crash), and two caches: compiled code by source + options +
//! architecture + NVRTC version (in memory, and on disk in a directory the caller
//! names), and loaded kernels by source + options + name + device, so that asking
//! again for a kernel costs a hash lookup.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CString};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::boundary::lock;
use crate::error::{Error, Result, Status};
use crate::handle::{Handle, HandleTable, Kind};

type Program = *mut libc::c_void;

/// The NVRTC entry points gpurt uses.
struct Nvrtc {
    _lib: libloading::Library,
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int,
    create: unsafe extern "C" fn(*mut Program, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char) -> c_int,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    log: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    ptx_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    ptx: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    cubin_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    cubin: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    destroy: unsafe extern "C" fn(*mut Program) -> c_int,
    num_archs: unsafe extern "C" fn(*mut c_int) -> c_int,
    archs: unsafe extern "C" fn(*mut c_int) -> c_int,
}

fn nvrtc() -> Result<&'static Nvrtc> {
    static NVRTC: OnceLock<std::result::Result<Nvrtc, String>> = OnceLock::new();
    NVRTC.get_or_init(load).as_ref().map_err(|why| Error::not_supported(why.clone()))
}

fn load() -> std::result::Result<Nvrtc, String> {
    let lib = crate::dylib::open_first("NVRTC (libnvrtc)", "GPURT_NVRTC_LIBRARY", &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"])?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the signature is NVRTC's, stable since CUDA 11.1.
            unsafe { crate::dylib::symbol(&lib, "NVRTC", $name) }?
        };
    }
    Ok(Nvrtc {
        version: sym!("nvrtcVersion"),
        create: sym!("nvrtcCreateProgram"),
        compile: sym!("nvrtcCompileProgram"),
        log_size: sym!("nvrtcGetProgramLogSize"),
        log: sym!("nvrtcGetProgramLog"),
        ptx_size: sym!("nvrtcGetPTXSize"),
        ptx: sym!("nvrtcGetPTX"),
        cubin_size: sym!("nvrtcGetCUBINSize"),
        cubin: sym!("nvrtcGetCUBIN"),
        destroy: sym!("nvrtcDestroyProgram"),
        num_archs: sym!("nvrtcGetNumSupportedArchs"),
        archs: sym!("nvrtcGetSupportedArchs"),
        _lib: lib,
    })
}

/// NVRTC's (major, minor) version.
pub fn version() -> Result<(i32, i32)> {
    let n = nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    nvrtc_check(unsafe { (n.version)(&mut major, &mut minor) }, "nvrtcVersion")?;
    Ok((major, minor))
}

/// The architectures this NVRTC compiles for, as compute capability × 10 (75, 80,
/// 90, ...): torch.cuda.get_arch_list's answer for run-time compiled code.
pub fn supported_archs() -> Result<Vec<i32>> {
    let n = nvrtc()?;
    let mut count = 0;
    nvrtc_check(unsafe { (n.num_archs)(&mut count) }, "nvrtcGetNumSupportedArchs")?;
    let mut archs = vec![0; count.max(0) as usize];
    nvrtc_check(unsafe { (n.archs)(archs.as_mut_ptr()) }, "nvrtcGetSupportedArchs")?;
    Ok(archs)
}

fn nvrtc_check(code: c_int, call: &str) -> Result<()> {
    match code {
        0 => Ok(()),
        1 => Err(Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, format!("{call} ran out of memory"))),
        _ => Err(Error::new(Status::GPURT_ERROR_COMPILATION, format!("{call} failed with NVRTC error {code}"))),
    }
}

/// Compiled code: cubin when an `sm_` architecture was targeted, else PTX.
#[derive(Debug)]
pub struct Compiled {
    pub code: Vec<u8>,
    pub is_cubin: bool,
    /// The compiler's warnings (empty for a cache hit from disk).
    pub log: CString,
}

/// The options as compiled: the caller's, plus the current device's architecture
/// unless they name one.
pub fn effective_options(options: &[String], device_arch: (i32, i32)) -> Vec<String> {
    let names_arch = options.iter().any(|o| o.starts_with("-arch") || o.starts_with("--gpu-architecture"));
    let mut all = options.to_vec();
    if !names_arch {
        all.push(format!("--gpu-architecture=sm_{}{}", device_arch.0, device_arch.1));
    }
    all
}

/// The compiled-code cache's key: every input that changes the output.
pub fn compile_key(source: &str, effective: &[String], nvrtc: (i32, i32)) -> Vec<u8> {
    let mut key = Vec::with_capacity(source.len() + 64);
    key.extend_from_slice(format!("nvrtc {}.{}\0", nvrtc.0, nvrtc.1).as_bytes());
    for o in effective {
        key.extend_from_slice(o.as_bytes());
        key.push(0);
    }
    key.push(0);
    key.extend_from_slice(source.as_bytes());
    key
}

fn run_nvrtc(source: &str, effective: &[String]) -> Result<Compiled> {
    let n = nvrtc()?;
    let src = CString::new(source).map_err(|_| Error::invalid_argument("the source contains a NUL byte"))?;
    let opts: Vec<CString> = effective
        .iter()
        .map(|o| CString::new(o.as_str()).map_err(|_| Error::invalid_argument(format!("option {o:?} contains a NUL byte"))))
        .collect::<Result<_>>()?;
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let mut prog: Program = std::ptr::null_mut();
    let name = c"gpurt_rtc.cu";
    nvrtc_check(unsafe { (n.create)(&mut prog, src.as_ptr(), name.as_ptr(), 0, std::ptr::null(), std::ptr::null()) }, "nvrtcCreateProgram")?;
    let result = (|| {
        let compiled = unsafe { (n.compile)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
        let log = read(prog, n.log_size, n.log).map(|l| String::from_utf8_lossy(trim_nul(&l)).trim().to_string())?;
        let log_c = CString::new(log.clone()).unwrap_or_default();
        if compiled != 0 {
            return Err(Error::new(Status::GPURT_ERROR_COMPILATION, format!("NVRTC compilation failed (error {compiled}):\n{log}")));
        }
        let cubin = read(prog, n.cubin_size, n.cubin).unwrap_or_default();
        if !cubin.is_empty() {
            return Ok(Compiled { code: cubin, is_cubin: true, log: log_c });
        }
        Ok(Compiled { code: read(prog, n.ptx_size, n.ptx)?, is_cubin: false, log: log_c })
    })();
    unsafe { (n.destroy)(&mut prog) };
    result
}

fn trim_nul(bytes: &[u8]) -> &[u8] {
    &bytes[..bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len())]
}

type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> c_int;
type ReadFn = unsafe extern "C" fn(Program, *mut c_char) -> c_int;

fn read(prog: Program, size: SizeFn, get: ReadFn) -> Result<Vec<u8>> {
    let mut n = 0;
    nvrtc_check(unsafe { size(prog, &mut n) }, "nvrtcGet*Size")?;
    let mut buf = vec![0u8; n];
    if n > 0 {
        nvrtc_check(unsafe { get(prog, buf.as_mut_ptr().cast()) }, "nvrtcGet*")?;
    }
    Ok(buf)
}

// ---- the compiled-code cache: memory, then disk ------------------------------------

static COMPILED: Mutex<Option<HashMap<Vec<u8>, Arc<Compiled>>>> = Mutex::new(None);
static CACHE_DIR: Mutex<Option<Option<PathBuf>>> = Mutex::new(None);

/// Sets (or with `None` turns off) the on-disk cache directory; the default is
/// `GPURT_RTC_CACHE_DIR`. The directory is created 0700 where missing; one that
/// belongs to another user or that its group or others may write is refused, as code
/// read from it is loaded onto the GPU (SECURITY.md), and the cache is left as it was.
pub fn set_cache_dir(dir: Option<&str>) -> Result<()> {
    if let Some(d) = dir {
        crate::files::private_directory(Path::new(d))
            .map_err(|why| Error::invalid_argument(format!("the kernel cache directory is not used: {why}")))?;
    }
    *lock(&CACHE_DIR) = Some(dir.map(PathBuf::from));
    Ok(())
}

/// The cache directory: the one set, else `GPURT_RTC_CACHE_DIR` if it is trusted
/// (otherwise a warning, once, and no disk cache).
fn cache_dir() -> Option<PathBuf> {
    lock(&CACHE_DIR).get_or_insert_with(|| std::env::var_os("GPURT_RTC_CACHE_DIR").and_then(|d| trusted_from_env(PathBuf::from(d)))).clone()
}

fn trusted_from_env(dir: PathBuf) -> Option<PathBuf> {
    match crate::files::private_directory(&dir) {
        Ok(()) => Some(dir),
        Err(why) => {
            crate::log::log(crate::log::Level::Warn, &format!("GPURT_RTC_CACHE_DIR is not used, kernels are compiled without the disk cache: {why}"));
            None
        }
    }
}

const DISK_MAGIC: &[u8; 8] = b"GPURTC1\n";

fn disk_path(dir: &Path, key: &[u8]) -> PathBuf {
    let mut h = rustc_hash::FxHasher::default();
    key.hash(&mut h);
    dir.join(format!("{:016x}-{}.gpurtc", h.finish(), key.len()))
}

/// A disk entry holds its whole key, so a hash collision reads as a miss.
pub fn encode_disk_entry(key: &[u8], c: &Compiled) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + c.code.len() + 17);
    out.extend_from_slice(DISK_MAGIC);
    out.extend_from_slice(&(key.len() as u64).to_le_bytes());
    out.extend_from_slice(key);
    out.push(c.is_cubin as u8);
    out.extend_from_slice(&c.code);
    out
}

pub fn decode_disk_entry(key: &[u8], bytes: &[u8]) -> Option<Compiled> {
    let rest = bytes.strip_prefix(DISK_MAGIC)?;
    let (len, rest) = rest.split_first_chunk::<8>()?;
    let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
    if rest.len() <= len || &rest[..len] != key {
        return None;
    }
    let (&is_cubin, code) = rest[len..].split_first()?;
    Some(Compiled { code: code.to_vec(), is_cubin: is_cubin == 1, log: CString::default() })
}

/// An entry is read only if it is a regular file of this user that no one else may
/// write (not a link): another user cannot plant code there.
fn load_from_disk(dir: &Path, key: &[u8]) -> Option<Compiled> {
    decode_disk_entry(key, &crate::files::read_private(&disk_path(dir, key))?)
}

/// Written 0600 to a new temporary name, then renamed: readers never see half a file.
fn store_on_disk(dir: &Path, key: &[u8], c: &Compiled) {
    let path = disk_path(dir, key);
    if let Err(e) = crate::files::write_atomically(&path, &encode_disk_entry(key, c), 0o600) {
        crate::log::log(crate::log::Level::Warn, &format!("could not write the kernel cache entry {}: {e}", path.display()));
    }
}

fn current_arch() -> Result<(i32, i32)> {
    use cudarc::driver::sys::CUdevice_attribute::*;
    let d = crate::device::current()?;
    Ok((
        crate::device::attribute(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        crate::device::attribute(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    ))
}

/// Compiles `source` (or finds it in the caches).
pub fn compile(source: &str, options: &[String]) -> Result<Arc<Compiled>> {
    let effective = effective_options(options, current_arch()?);
    let key = compile_key(source, &effective, version()?);
    if let Some(c) = lock(&COMPILED).get_or_insert_with(HashMap::new).get(&key) {
        return Ok(c.clone());
    }
    let dir = cache_dir();
    let compiled = Arc::new(match dir.as_deref().and_then(|dir| load_from_disk(dir, &key)) {
        Some(c) => c,
        None => {
            let c = run_nvrtc(source, &effective)?;
            if let Some(dir) = &dir {
                store_on_disk(dir, &key, &c);
            }
            c
        }
    });
    lock(&COMPILED).get_or_insert_with(HashMap::new).insert(key, compiled.clone());
    Ok(compiled)
}

// ---- program handles: compiled code the caller can read and load ------------------

static PROGRAM_IDS: HandleTable<u64> = HandleTable::new(Kind::Program);
static PROGRAMS: Mutex<Option<HashMap<u64, Arc<Compiled>>>> = Mutex::new(None);

pub fn create_program(source: &str, options: &[String]) -> Result<Handle> {
    let compiled = compile(source, options)?;
    let handle = PROGRAM_IDS.insert(0)?;
    lock(&PROGRAMS).get_or_insert_with(HashMap::new).insert(handle.0, compiled);
    Ok(handle)
}

pub fn program(handle: Handle) -> Result<Arc<Compiled>> {
    PROGRAM_IDS.get(handle)?;
    lock(&PROGRAMS).as_ref().and_then(|p| p.get(&handle.0).cloned()).ok_or_else(|| Error::invalid_handle("the program was destroyed"))
}

pub fn destroy_program(handle: Handle) -> Result<()> {
    PROGRAM_IDS.remove(handle)?;
    lock(&PROGRAMS).as_mut().and_then(|p| p.remove(&handle.0));
    Ok(())
}

// ---- the kernel cache --------------------------------------------------------------

/// A cached kernel's identity; the map is keyed by its hash and checked in full.
struct KernelEntry {
    source: String,
    options: Vec<String>,
    name: String,
    device: i32,
    kernel: Handle,
}

/// Kernels by hash; each cached module stays loaded until `clear_cache`.
#[derive(Default)]
struct KernelCache {
    entries: HashMap<u64, Vec<KernelEntry>>,
    modules: Vec<Handle>,
    /// Kernels by a caller's recipe (what it generates its source from) and device,
    /// so that a repeated request skips generating and hashing the source.
    recipes: rustc_hash::FxHashMap<String, Vec<(i32, Handle)>>,
}

/// Bumped by every `clear_cache`: a kernel handle a caller remembers is good while the
/// epoch it was served in lasts.
static EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The kernel caches' epoch (see `EPOCH`).
pub fn cache_epoch() -> u64 {
    EPOCH.load(std::sync::atomic::Ordering::Acquire)
}

static KERNEL_CACHE: Mutex<Option<KernelCache>> = Mutex::new(None);

pub fn kernel_key_hash(source: &str, options: &[&str], name: &str, device: i32) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    source.hash(&mut h);
    options.hash(&mut h);
    name.hash(&mut h);
    device.hash(&mut h);
    h.finish()
}

/// The kernel `name` of `source` compiled with `options` for the current device:
/// compiled, loaded and looked up once, then served from the cache. The handle stays
/// valid until `clear_cache`.
pub fn get_kernel(source: &str, options: &[&str], name: &str) -> Result<Handle> {
    let device = crate::device::current()?;
    let hash = kernel_key_hash(source, options, name, device);
    let found = |cache: &KernelCache| {
        cache.entries.get(&hash)?.iter().find(|e| e.device == device && e.name == name && e.source == source && e.options == options).map(|e| e.kernel)
    };
    if let Some(k) = lock(&KERNEL_CACHE).as_ref().and_then(found) {
        return Ok(k);
    }
    let owned: Vec<String> = options.iter().map(|o| o.to_string()).collect();
    let compiled = compile(source, &owned)?;
    let module = super::load_data(&compiled.code)?;
    let kernel = match super::get_kernel(module, name) {
        Ok(k) => k,
        Err(e) => {
            let _ = super::unload(module);
            return Err(e);
        }
    };
    let mut cache = lock(&KERNEL_CACHE);
    let cache = cache.get_or_insert_with(KernelCache::default);
    if let Some(k) = found(cache) {
        // Another thread got there first: keep its module, drop ours.
        let _ = super::unload(module);
        return Ok(k);
    }
    cache.modules.push(module);
    let entry = KernelEntry { source: source.to_string(), options: owned, name: name.to_string(), device, kernel };
    cache.entries.entry(hash).or_default().push(entry);
    Ok(kernel)
}

/// The kernel cached for a caller's `recipe` on `device`, if any: no context switch,
/// no source generated or hashed (the hot path of elementwise calls and random fills).
pub fn cached_kernel(device: i32, recipe: &str) -> Option<Handle> {
    let cache = lock(&KERNEL_CACHE);
    cache.as_ref()?.recipes.get(recipe)?.iter().find(|(d, _)| *d == device).map(|&(_, k)| k)
}

/// The kernel `name` of the source that `recipe` stands for (`source` generates it,
/// on a miss only), compiled without options for `device`: `get_kernel` (with the
/// device current), keyed by the short recipe instead of the whole source. Cleared
/// with the caches.
pub fn get_kernel_by_recipe(device: i32, recipe: &str, name: &str, source: impl FnOnce() -> Result<String>) -> Result<Handle> {
    if let Some(k) = cached_kernel(device, recipe) {
        return Ok(k);
    }
    let kernel = crate::device::with_device(device, || get_kernel(&source()?, &[], name))?;
    let mut cache = lock(&KERNEL_CACHE);
    let by_device = cache.get_or_insert_with(KernelCache::default).recipes.entry(recipe.to_string()).or_default();
    if !by_device.iter().any(|(d, _)| *d == device) {
        by_device.push((device, kernel));
    }
    Ok(kernel)
}

/// Empties both in-memory caches and unloads the cached modules (their kernel
/// handles become invalid). The disk cache stays.
pub fn clear_cache() -> Result<()> {
    EPOCH.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    lock(&COMPILED).take();
    let cache = lock(&KERNEL_CACHE).take();
    for m in cache.into_iter().flat_map(|c| c.modules) {
        super::unload(m)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_device_architecture_is_added_unless_named() {
        assert_eq!(effective_options(&s(&["-O3"]), (9, 0)), s(&["-O3", "--gpu-architecture=sm_90"]));
        assert_eq!(effective_options(&s(&["-arch=compute_80"]), (9, 0)), s(&["-arch=compute_80"]));
        assert_eq!(effective_options(&s(&["--gpu-architecture=sm_86"]), (9, 0)), s(&["--gpu-architecture=sm_86"]));
    }

    #[test]
    fn every_input_changes_the_compile_key() {
        let base = compile_key("k", &s(&["-a", "-b"]), (12, 8));
        assert_ne!(base, compile_key("k ", &s(&["-a", "-b"]), (12, 8)), "source");
        assert_ne!(base, compile_key("k", &s(&["-a"]), (12, 8)), "options");
        assert_ne!(base, compile_key("k", &s(&["-a-b"]), (12, 8)), "option boundaries");
        assert_ne!(base, compile_key("k", &s(&["-b", "-a"]), (12, 8)), "option order");
        assert_ne!(base, compile_key("k", &s(&["-a", "-b"]), (13, 0)), "NVRTC version");
        assert_eq!(base, compile_key("k", &s(&["-a", "-b"]), (12, 8)));
        let h = kernel_key_hash("src", &["-O3"], "f", 0);
        assert_eq!(h, kernel_key_hash("src", &["-O3"], "f", 0));
        assert_ne!(h, kernel_key_hash("src", &["-O3"], "f", 1), "device");
        assert_ne!(h, kernel_key_hash("src", &["-O3"], "g", 0), "kernel name");
        assert_ne!(h, kernel_key_hash("src", &["-O", "3"], "f", 0), "option boundaries");
    }

    #[test]
    fn disk_entries_round_trip_and_reject_other_keys() {
        let c = Compiled { code: vec![0x7f, b'E', b'L', b'F', 9, 9], is_cubin: true, log: CString::default() };
        let bytes = encode_disk_entry(b"key one", &c);
        let back = decode_disk_entry(b"key one", &bytes).unwrap();
        assert_eq!((back.code, back.is_cubin), (c.code.clone(), true));
        assert!(decode_disk_entry(b"key two", &bytes).is_none(), "a colliding file is a miss");
        assert!(decode_disk_entry(b"key one", &bytes[..12]).is_none(), "a truncated file is a miss");
        assert!(decode_disk_entry(b"key one", b"junk").is_none());
    }

    /// The disk cache's trust rules (SECURITY.md): entries are written 0600, and
    /// one planted as a link, or writable by others, is a miss.
    #[cfg(not(miri))]
    #[test]
    fn the_disk_cache_reads_only_this_users_private_entries() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let scratch = crate::files::ScratchDir::new("rtc-cache");
        let dir = scratch.join("cache");
        crate::files::private_directory(&dir).unwrap();
        let c = Compiled { code: b"kernel code".to_vec(), is_cubin: false, log: CString::default() };
        store_on_disk(&dir, b"key", &c);
        let entry = disk_path(&dir, b"key");
        assert_eq!(std::fs::metadata(&entry).unwrap().mode() & 0o777, 0o600);
        assert_eq!(load_from_disk(&dir, b"key").unwrap().code, c.code);
        // Another user's code, linked in at the entry's name: not read.
        let planted = dir.join("planted");
        std::fs::write(&planted, encode_disk_entry(b"key", &Compiled { code: b"evil".to_vec(), is_cubin: false, log: CString::default() })).unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::remove_file(&entry).unwrap();
        std::os::unix::fs::symlink(&planted, &entry).unwrap();
        assert!(load_from_disk(&dir, b"key").is_none(), "an entry that is a link is ignored");
        std::fs::remove_file(&entry).unwrap();
        std::fs::copy(&planted, &entry).unwrap();
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(load_from_disk(&dir, b"key").is_none(), "an entry others may write is ignored");
        // A directory anyone may write is refused, and the one set before stays.
        set_cache_dir(Some(dir.to_str().unwrap())).unwrap();
        let open = dir.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = set_cache_dir(Some(open.to_str().unwrap())).unwrap_err();
        assert_eq!(e.status, Status::GPURT_ERROR_INVALID_ARGUMENT);
        assert!(e.message.contains("writable by its group or others"), "{}", e.message);
        assert_eq!(cache_dir(), Some(dir.clone()));
        assert!(trusted_from_env(open).is_none(), "GPURT_RTC_CACHE_DIR naming an open directory: no disk cache");
        set_cache_dir(None).unwrap();
    }

    #[test]
    fn without_nvrtc_compilation_is_not_supported() {
        if nvrtc().is_ok() {
            return; // this machine has NVRTC: the GPU tests cover it
        }
        let e = version().unwrap_err();
        assert_eq!(e.status, Status::GPURT_ERROR_NOT_SUPPORTED);
        assert!(e.message.contains("GPURT_NVRTC_LIBRARY"), "{}", e.message);
    }
}
