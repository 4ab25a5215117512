//! What the benchmarks share: loading gpurt's shared library as a C caller does,
//! status checks, medians.

use cudarc::driver::sys;

/// gpurt's shared library: `$GPURT_LIB`, else the bundle's `lib/libgpurt.so.0`.
pub fn library() -> libloading::Library {
    let path = std::env::var("GPURT_LIB").unwrap_or_else(|_| "lib/libgpurt.so.0".into());
    unsafe { libloading::Library::new(&path) }.unwrap_or_else(|e| panic!("load {path}: {e}"))
}

/// A function from the loaded library, by its literal name.
macro_rules! sym {
    ($lib:expr, $name:literal) => {
        *$lib.get($name.as_bytes()).unwrap_or_else(|e| panic!("{}: {e}", $name))
    };
}
pub(crate) use sym;

pub fn ok(code: sys::CUresult) {
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS);
}

pub fn st(s: i32) {
    assert_eq!(s, 0, "gpurt call failed with status {s}");
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}
