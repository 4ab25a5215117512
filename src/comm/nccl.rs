//! NCCL (`libnccl.so.2`), loaded at run time the first time a comm call needs it,
//! as the driver is: without it the library works and comm calls say NCCL is
//! missing. Only the functions gpurt uses, with NCCL's C types.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use crate::error::{Error, Result, Status};

pub type RawComm = *mut c_void;
pub(crate) type NcclResult = c_int;

pub(crate) const SUCCESS: NcclResult = 0;
pub(crate) const IN_PROGRESS: NcclResult = 7;

/// `ncclUniqueId`: 128 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [c_char; 128],
}

/// `ncclConfig_t` as NCCL 2.14 laid it out (later versions accept it: the size,
/// magic and version fields say which layout the caller has).
#[repr(C)]
pub struct Config {
    size: usize,
    magic: u32,
    version: u32,
    pub blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
}

const CONFIG_UNDEF_INT: c_int = c_int::MIN;

impl Config {
    pub fn non_blocking() -> Config {
        Config {
            size: std::mem::size_of::<Config>(),
            magic: 0xcafe_beef,
            version: 21400,
            blocking: 0,
            cga_cluster_size: CONFIG_UNDEF_INT,
            min_ctas: CONFIG_UNDEF_INT,
            max_ctas: CONFIG_UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: CONFIG_UNDEF_INT,
        }
    }
}

type Stream = *mut c_void;

pub struct Nccl {
    _lib: libloading::Library,
    pub get_version: unsafe extern "C" fn(*mut c_int) -> NcclResult,
    pub get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> NcclResult,
    pub comm_init_all: unsafe extern "C" fn(*mut RawComm, c_int, *const c_int) -> NcclResult,
    pub comm_init_rank_config: unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int, *mut Config) -> NcclResult,
    pub comm_destroy: unsafe extern "C" fn(RawComm) -> NcclResult,
    pub comm_abort: unsafe extern "C" fn(RawComm) -> NcclResult,
    pub comm_get_async_error: unsafe extern "C" fn(RawComm, *mut NcclResult) -> NcclResult,
    get_error_string: unsafe extern "C" fn(NcclResult) -> *const c_char,
    get_last_error: Option<unsafe extern "C" fn(RawComm) -> *const c_char>,
    pub all_reduce: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, Stream) -> NcclResult,
    pub broadcast: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, Stream) -> NcclResult,
    pub reduce: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, c_int, RawComm, Stream) -> NcclResult,
    pub all_gather: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, RawComm, Stream) -> NcclResult,
    pub reduce_scatter: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, RawComm, Stream) -> NcclResult,
    pub send: unsafe extern "C" fn(*const c_void, usize, c_int, c_int, RawComm, Stream) -> NcclResult,
    pub recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, RawComm, Stream) -> NcclResult,
    pub group_start: unsafe extern "C" fn() -> NcclResult,
    pub group_end: unsafe extern "C" fn() -> NcclResult,
    pub comm_count: unsafe extern "C" fn(RawComm, *mut c_int) -> NcclResult,
    pub comm_user_rank: unsafe extern "C" fn(RawComm, *mut c_int) -> NcclResult,
    /// `ncclCommSplit` (NCCL 2.18 and later; older NCCL works without it).
    pub comm_split: Option<unsafe extern "C" fn(RawComm, c_int, c_int, *mut RawComm, *mut Config) -> NcclResult>,
}

// NCCL's entry points are thread-safe for distinct communicators; gpurt never
// drives one communicator from two threads at once without the caller's order.
unsafe impl Send for Nccl {}
unsafe impl Sync for Nccl {}

pub const LIBRARY: &str = "libnccl.so.2";

fn load() -> std::result::Result<Nccl, String> {
    let lib = unsafe { libloading::Library::new(LIBRARY) }.map_err(|e| format!("{LIBRARY} does not load ({e})"))?;
    macro_rules! symbol {
        ($name:literal) => {
            unsafe { lib.get($name.as_bytes()) }.map(|s: libloading::Symbol<_>| *s).map_err(|_| format!("{LIBRARY} lacks {}", $name))?
        };
    }
    Ok(Nccl {
        get_version: symbol!("ncclGetVersion"),
        get_unique_id: symbol!("ncclGetUniqueId"),
        comm_init_all: symbol!("ncclCommInitAll"),
        comm_init_rank_config: symbol!("ncclCommInitRankConfig"),
        comm_destroy: symbol!("ncclCommDestroy"),
        comm_abort: symbol!("ncclCommAbort"),
        comm_get_async_error: symbol!("ncclCommGetAsyncError"),
        get_error_string: symbol!("ncclGetErrorString"),
        get_last_error: unsafe { lib.get(b"ncclGetLastError") }.ok().map(|s: libloading::Symbol<_>| *s),
        all_reduce: symbol!("ncclAllReduce"),
        broadcast: symbol!("ncclBroadcast"),
        reduce: symbol!("ncclReduce"),
        all_gather: symbol!("ncclAllGather"),
        reduce_scatter: symbol!("ncclReduceScatter"),
        send: symbol!("ncclSend"),
        recv: symbol!("ncclRecv"),
        group_start: symbol!("ncclGroupStart"),
        group_end: symbol!("ncclGroupEnd"),
        comm_count: symbol!("ncclCommCount"),
        comm_user_rank: symbol!("ncclCommUserRank"),
        comm_split: unsafe { lib.get(b"ncclCommSplit") }.ok().map(|s: libloading::Symbol<_>| *s),
        _lib: lib,
    })
}

/// NCCL, loaded once; where it is missing, a not-supported error naming it.
pub fn get() -> Result<&'static Nccl> {
    static NCCL: OnceLock<std::result::Result<Nccl, String>> = OnceLock::new();
    NCCL.get_or_init(load).as_ref().map_err(|why| {
        Error::not_supported(format!("multi-GPU communication needs NCCL: {why} (install NCCL 2, or put libnccl.so.2 on the loader path)"))
    })
}

impl Nccl {
    /// The error for NCCL's answer `code` to `call` on `comm` (NULL: none yet).
    pub fn error(&self, call: &str, code: NcclResult, comm: RawComm) -> Error {
        let text = |p: *const c_char| if p.is_null() { String::new() } else { unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned() };
        let mut message = format!("{call}: {}", text(unsafe { (self.get_error_string)(code) }));
        if let Some(last) = self.get_last_error {
            let detail = text(unsafe { last(comm) });
            if !detail.is_empty() {
                message = format!("{message} ({detail})");
            }
        }
        let status = match code {
            1 => Status::GPURT_ERROR_CUDA,
            4 | 5 => Status::GPURT_ERROR_INVALID_ARGUMENT,
            IN_PROGRESS => Status::GPURT_ERROR_NOT_READY,
            3 => Status::GPURT_ERROR_INTERNAL,
            _ => Status::GPURT_ERROR_COMM, // system and remote errors: a peer, the network
        };
        Error::new(status, message)
    }

    pub fn check(&self, call: &str, code: NcclResult, comm: RawComm) -> Result<()> {
        match code {
            SUCCESS => Ok(()),
            code => Err(self.error(call, code, comm)),
        }
    }
}
