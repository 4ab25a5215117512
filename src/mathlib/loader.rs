//! The math libraries, each opened on first use like NCCL: what gpurt calls of them
//! (create a handle, bind it to a stream, and for cuBLAS its workspace and math
//! mode; destroy cuBLAS's and cuBLASLt's) and their versions. Without a library its
//! calls say which one is missing.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use cudarc::driver::sys::CUstream;

use crate::error::{Error, Result, Status};

/// A library's handle (`cublasHandle_t`, `cudnnHandle_t`, ...): a pointer.
pub type RawHandle = *mut c_void;

/// The libraries gpurt keeps handles of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Library {
    Blas = 0,
    BlasLt = 1,
    Solver = 2,
    Sparse = 3,
    Dnn = 4,
}

pub const LIBRARIES: [Library; 5] = [Library::Blas, Library::BlasLt, Library::Solver, Library::Sparse, Library::Dnn];

/// How a library tells its version.
enum VersionCall {
    /// `xGetProperty(MAJOR_VERSION = 0 | MINOR_VERSION = 1 | PATCH_LEVEL = 2, int *)`.
    Property(&'static str),
    /// `size_t xGetVersion(void)`, as major × 10000 + minor × 100 + patch.
    Number(&'static str),
}

/// Where a library is and what its entry points are called.
struct Spec {
    name: &'static str,
    override_var: &'static str,
    sonames: &'static [&'static str],
    create: &'static str,
    /// cuBLAS and cuBLASLt, whose handles `gpurt_blas_handles_release` gives back.
    destroy: Option<&'static str>,
    set_stream: Option<&'static str>,
    version: VersionCall,
    /// The library's status for a failed allocation (reported as out of memory).
    alloc_failed: c_int,
}

impl Library {
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    fn spec(self) -> &'static Spec {
        static SPECS: [Spec; 5] = [
            Spec {
                name: "cuBLAS",
                override_var: "GPURT_CUBLAS_LIBRARY",
                sonames: &["libcublas.so.13", "libcublas.so.12"],
                create: "cublasCreate_v2",
                destroy: Some("cublasDestroy_v2"),
                set_stream: Some("cublasSetStream_v2"),
                version: VersionCall::Property("cublasGetProperty"),
                alloc_failed: 3,
            },
            Spec {
                name: "cuBLASLt",
                override_var: "GPURT_CUBLASLT_LIBRARY",
                sonames: &["libcublasLt.so.13", "libcublasLt.so.12"],
                create: "cublasLtCreate",
                destroy: Some("cublasLtDestroy"),
                set_stream: None, // cublasLtMatmul takes its stream per call
                version: VersionCall::Number("cublasLtGetVersion"),
                alloc_failed: 3,
            },
            Spec {
                name: "cuSOLVER",
                override_var: "GPURT_CUSOLVER_LIBRARY",
                sonames: &["libcusolver.so.12", "libcusolver.so.11"],
                create: "cusolverDnCreate",
                destroy: None,
                set_stream: Some("cusolverDnSetStream"),
                version: VersionCall::Property("cusolverGetProperty"),
                alloc_failed: 2,
            },
            Spec {
                name: "cuSPARSE",
                override_var: "GPURT_CUSPARSE_LIBRARY",
                sonames: &["libcusparse.so.12", "libcusparse.so.11"],
                create: "cusparseCreate",
                destroy: None,
                set_stream: Some("cusparseSetStream"),
                version: VersionCall::Property("cusparseGetProperty"),
                alloc_failed: 2,
            },
            Spec {
                name: "cuDNN",
                override_var: "GPURT_CUDNN_LIBRARY",
                sonames: &["libcudnn.so.9"],
                create: "cudnnCreate",
                destroy: None,
                set_stream: Some("cudnnSetStream"),
                version: VersionCall::Number("cudnnGetVersion"),
                alloc_failed: 2000,
            },
        ];
        &SPECS[self as usize]
    }
}

type Create = unsafe extern "C" fn(*mut RawHandle) -> c_int;
type SetStream = unsafe extern "C" fn(RawHandle, CUstream) -> c_int;
type SetWorkspace = unsafe extern "C" fn(RawHandle, *mut c_void, usize) -> c_int;
type SetMathMode = unsafe extern "C" fn(RawHandle, c_int) -> c_int;
type Destroy = unsafe extern "C" fn(RawHandle) -> c_int;
type GetMathMode = unsafe extern "C" fn(RawHandle, *mut c_int) -> c_int;

/// One loaded library.
pub struct Api {
    library: Library,
    create: Create,
    set_stream: Option<SetStream>,
    /// cuBLAS only.
    set_workspace: Option<SetWorkspace>,
    set_math_mode: Option<SetMathMode>,
    get_math_mode: Option<GetMathMode>,
    destroy: Option<Destroy>,
    /// major × 10000 + minor × 100 + patch.
    pub version: i32,
    _lib: libloading::Library,
}

// The function pointers are the libraries' thread-safe entry points; a handle is
// used by one thread at a time (the thread that leased it).
unsafe impl Send for Api {}
unsafe impl Sync for Api {}

/// cuBLAS's math modes: `CUBLAS_DEFAULT_MATH` and `CUBLAS_TF32_TENSOR_OP_MATH`.
const DEFAULT_MATH: c_int = 0;
const TF32_TENSOR_OP_MATH: c_int = 3;

fn load(library: Library) -> std::result::Result<Api, String> {
    let spec = library.spec();
    let lib = crate::dylib::open_first(spec.name, spec.override_var, spec.sonames)?;
    // SAFETY (each symbol): the types are the libraries' C signatures.
    let version = match spec.version {
        VersionCall::Property(name) => {
            let get: unsafe extern "C" fn(c_int, *mut c_int) -> c_int = unsafe { crate::dylib::symbol(&lib, spec.name, name) }?;
            let mut parts = [0; 3];
            for (kind, part) in parts.iter_mut().enumerate() {
                unsafe { get(kind as c_int, part) };
            }
            parts[0] * 10000 + parts[1] * 100 + parts[2]
        }
        VersionCall::Number(name) => {
            let get: unsafe extern "C" fn() -> usize = unsafe { crate::dylib::symbol(&lib, spec.name, name) }?;
            unsafe { get() }.min(i32::MAX as usize) as i32
        }
    };
    let blas = library == Library::Blas;
    Ok(Api {
        library,
        create: unsafe { crate::dylib::symbol(&lib, spec.name, spec.create) }?,
        set_stream: match spec.set_stream {
            Some(name) => Some(unsafe { crate::dylib::symbol(&lib, spec.name, name) }?),
            None => None,
        },
        set_workspace: if blas { Some(unsafe { crate::dylib::symbol(&lib, spec.name, "cublasSetWorkspace_v2") }?) } else { None },
        set_math_mode: if blas { Some(unsafe { crate::dylib::symbol(&lib, spec.name, "cublasSetMathMode") }?) } else { None },
        get_math_mode: if blas { Some(unsafe { crate::dylib::symbol(&lib, spec.name, "cublasGetMathMode") }?) } else { None },
        destroy: match spec.destroy {
            Some(name) => Some(unsafe { crate::dylib::symbol(&lib, spec.name, name) }?),
            None => None,
        },
        version,
        _lib: lib,
    })
}

/// `library`, loaded once; where it is missing, a not-supported error naming it.
pub fn get(library: Library) -> Result<&'static Api> {
    static LOADED: [OnceLock<std::result::Result<Api, String>>; 5] = [const { OnceLock::new() }; 5];
    LOADED[library as usize]
        .get_or_init(|| load(library))
        .as_ref()
        .map_err(|why| Error::not_supported(format!("{} handles are not available: {why}", library.name())))
}

impl Api {
    /// Ok for the library's success, else the error of `call` (named only then:
    /// the rebind path runs this twice per call).
    #[inline]
    fn check(&self, call: impl FnOnce() -> &'static str, code: c_int) -> Result<()> {
        match code {
            0 => Ok(()),
            code => Err(self.error(call(), code)),
        }
    }

    #[cold]
    #[inline(never)]
    fn error(&self, call: &str, code: c_int) -> Error {
        let status = if code == self.library.spec().alloc_failed { Status::GPURT_ERROR_OUT_OF_MEMORY } else { Status::GPURT_ERROR_CUDA };
        Error::new(status, format!("{} failed: {} status {code}", call, self.library.name()))
    }

    /// A new handle for the current context's device.
    pub fn create(&self) -> Result<RawHandle> {
        let mut handle = std::ptr::null_mut();
        self.check(|| self.library.spec().create, unsafe { (self.create)(&mut handle) })?;
        Ok(handle)
    }

    /// Binds `handle` to `stream`; cuBLASLt, which takes its stream per call, has nothing to bind.
    pub fn set_stream(&self, handle: RawHandle, stream: CUstream) -> Result<()> {
        match self.set_stream {
            Some(set) => self.check(|| self.library.spec().set_stream.unwrap_or_default(), unsafe { set(handle, stream) }),
            None => Ok(()),
        }
    }

    /// cuBLAS: the workspace for the bound stream (cublasSetStream resets it to
    /// cuBLAS's own, so it is set after every bind).
    pub fn set_workspace(&self, handle: RawHandle, workspace: u64, size: usize) -> Result<()> {
        match self.set_workspace {
            Some(set) => self.check(|| "cublasSetWorkspace_v2", unsafe { set(handle, workspace as *mut c_void, size) }),
            None => Ok(()),
        }
    }

    /// cuBLAS: TF32 tensor-core math for fp32 GEMMs, or the default math.
    pub fn set_allow_tf32(&self, handle: RawHandle, allow: bool) -> Result<()> {
        self.set_math_mode(handle, if allow { TF32_TENSOR_OP_MATH } else { DEFAULT_MATH })
    }

    /// cuBLAS: the handle's math mode, as whoever set it last chose (None for the others).
    pub fn math_mode(&self, handle: RawHandle) -> Result<Option<c_int>> {
        let Some(get) = self.get_math_mode else { return Ok(None) };
        let mut mode = 0;
        self.check(|| "cublasGetMathMode", unsafe { get(handle, &mut mode) })?;
        Ok(Some(mode))
    }

    /// cuBLAS: sets the handle's math mode.
    pub fn set_math_mode(&self, handle: RawHandle, mode: c_int) -> Result<()> {
        match self.set_math_mode {
            Some(set) => self.check(|| "cublasSetMathMode", unsafe { set(handle, mode) }),
            None => Ok(()),
        }
    }

    /// Whether gpurt can destroy this library's handles (cuBLAS, cuBLASLt).
    pub fn can_destroy(&self) -> bool {
        self.destroy.is_some()
    }

    /// Destroys `handle` (the library waits for the device).
    pub fn destroy(&self, handle: RawHandle) -> Result<()> {
        match self.destroy {
            Some(destroy) => self.check(|| self.library.spec().destroy.unwrap_or_default(), unsafe { destroy(handle) }),
            None => Err(Error::not_supported(format!("gpurt does not destroy {} handles", self.library.name()))),
        }
    }
}
