//! The math libraries' handles (cuBLAS, cuBLASLt, cuSOLVER, cuSPARSE, cuDNN), as
//! `torch.cuda.current_blas_handle()` and CuPy's `get_cublas_handle()` give them:
//! `loader` opens each library on first use, `handles` keeps one handle per thread,
//! library and device, bound to the caller's stream, with workspaces from gpurt's
//! pools, and `workspace` reads their sizes as PyTorch does. `ffi` holds the C
//! entry points.

pub mod ffi;
pub mod handles;
pub mod loader;
pub mod workspace;

pub use handles::{allow_tf32, clear_workspaces, counts, handle, release_blas, set_allow_tf32, workspace_bytes, Bound};
pub use loader::Library;

use crate::error::Result;
use crate::handle::Handle;

/// This thread's `library` handle bound to the stream `stream` names.
#[inline]
pub fn for_stream(library: Library, stream: Handle) -> Result<Bound> {
    let stream = crate::stream::get(stream)?;
    // The handle's workspace lies in the device's default pool, which its work uses
    // without allocating: a pool a share group may put to sleep is touched first.
    crate::alloc::mempool::on_request::touch_default(stream.device())?;
    handle(library, stream)
}

/// This thread's `library` handle bound to its current stream on its current device.
pub fn for_current_stream(library: Library) -> Result<Bound> {
    for_stream(library, crate::stream::current(crate::device::current()?)?)
}

/// `library`'s version, major × 10000 + minor × 100 + patch; not supported where
/// the library is missing.
pub fn version(library: Library) -> Result<i32> {
    Ok(loader::get(library)?.version)
}
