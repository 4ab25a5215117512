//! A caller's function pair as a pool's upstream (an engine's arena, a NUMA-aware
//! allocator, RMM under gpurt's cache, as cupy's `MemoryPool(allocator)`).

use libc::{c_int, c_void};

use crate::alloc::pool::SegmentSource;
use crate::error::{Error, Result, Status};

/// `void *alloc(size_t size, int device, void *stream, void *context)`: NULL for no memory.
pub type gpurt_upstream_alloc_fn = Option<unsafe extern "C" fn(usize, c_int, *mut c_void, *mut c_void) -> *mut c_void>;
/// `void free(void *ptr, size_t size, int device, void *stream, void *context)`.
pub type gpurt_upstream_free_fn = Option<unsafe extern "C" fn(*mut c_void, usize, c_int, *mut c_void, *mut c_void)>;

/// A caller's allocation functions and their context.
#[derive(Clone, Copy)]
pub struct UserFunctions {
    pub alloc: unsafe extern "C" fn(usize, c_int, *mut c_void, *mut c_void) -> *mut c_void,
    pub free: unsafe extern "C" fn(*mut c_void, usize, c_int, *mut c_void, *mut c_void),
    pub context: usize,
}

/// Segments from a caller's functions; stream-ordering markers, the memory figures
/// and the capture check from `markers` (the driver's source for the same device).
pub struct UserSource<M: SegmentSource> {
    functions: UserFunctions,
    device: i32,
    markers: M,
}

impl<M: SegmentSource> UserSource<M> {
    pub fn new(functions: UserFunctions, device: i32, markers: M) -> Self {
        UserSource { functions, device, markers }
    }
}

impl<M: SegmentSource> SegmentSource for UserSource<M> {
    /// The caller's `alloc`, with the pool's device current and the native stream
    /// the segment is first for.
    fn allocate(&self, size: u64, stream: u64) -> Result<u64> {
        self.markers.may_allocate(stream)?;
        let native = self.markers.native_stream(stream) as *mut c_void;
        let (f, ctx) = (self.functions, self.functions.context as *mut c_void);
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the caller gave these functions for this use, with this context.
        self.markers.in_context(&mut || ptr = unsafe { (f.alloc)(size as usize, self.device, native, ctx) })?;
        if ptr.is_null() {
            return Err(Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, format!("the pool's user upstream returned NULL for {size} bytes")));
        }
        if ptr as u64 % 512 != 0 {
            self.release(ptr as u64, size);
            return Err(Error::invalid_argument(format!("the pool's user upstream returned {ptr:p}, not aligned to 512 bytes")));
        }
        Ok(ptr as u64)
    }
    /// The caller's `free`, with the pool's device current and a NULL stream: a
    /// released segment is idle.
    fn release(&self, addr: u64, size: u64) {
        let f = self.functions;
        // SAFETY: `addr` came from `f.alloc` with this size and context.
        let call = &mut || unsafe { (f.free)(addr as *mut c_void, size as usize, self.device, std::ptr::null_mut(), f.context as *mut c_void) };
        if let Err(e) = self.markers.in_context(call) {
            crate::log::log(crate::log::Level::Error, &format!("giving a segment back to the pool's user upstream: {e}"));
        }
    }
    markers_from!(markers);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::alloc::caching::CachingAllocator;
    use crate::alloc::upstream::PoolSource;
    use crate::alloc::config::AllocConfig;
    use crate::alloc::host::HostSource;

    const MIB: u64 = 1 << 20;

    /// A caller's arena: bump allocation in a range of fake addresses, a byte budget,
    /// and counts of what was asked.
    struct Arena {
        next: AtomicU64,
        budget: AtomicU64,
        live: AtomicU64,
        calls: AtomicU64,
    }

    unsafe extern "C" fn arena_alloc(size: usize, device: c_int, _stream: *mut c_void, ctx: *mut c_void) -> *mut c_void {
        let arena = &*(ctx as *const Arena);
        arena.calls.fetch_add(1, Ordering::Relaxed);
        assert_eq!(device, 3, "the pool's device is passed on");
        if arena.live.load(Ordering::Relaxed) + size as u64 > arena.budget.load(Ordering::Relaxed) {
            return std::ptr::null_mut();
        }
        arena.live.fetch_add(size as u64, Ordering::Relaxed);
        arena.next.fetch_add(size as u64, Ordering::Relaxed) as *mut c_void
    }

    unsafe extern "C" fn arena_free(_ptr: *mut c_void, size: usize, _device: c_int, stream: *mut c_void, ctx: *mut c_void) {
        assert!(stream.is_null(), "a released segment is idle");
        (*(ctx as *const Arena)).live.fetch_sub(size as u64, Ordering::Relaxed);
    }

    #[test]
    fn a_user_upstream_serves_segments_and_its_failure_is_a_clean_out_of_memory() {
        let arena = Box::new(Arena { next: AtomicU64::new(1 << 40), budget: AtomicU64::new(64 * MIB), live: AtomicU64::new(0), calls: AtomicU64::new(0) });
        let functions = UserFunctions { alloc: arena_alloc, free: arena_free, context: &*arena as *const Arena as usize };
        let source: PoolSource = Box::new(UserSource::new(functions, 3, HostSource::new(1 << 40)));
        let allocator = CachingAllocator::new(source, AllocConfig::default());
        let a = allocator.malloc(30 * MIB, 1).unwrap();
        let b = allocator.malloc(1000, 1).unwrap();
        assert_eq!(arena.live.load(Ordering::Relaxed), 32 * MIB, "a large segment and a small one from the upstream");
        let before = allocator.stats();
        let err = allocator.malloc(40 * MIB, 1).unwrap_err();
        assert_eq!(err.status, Status::GPURT_ERROR_OUT_OF_MEMORY);
        assert!(err.message.contains("user upstream returned NULL"), "{}", err.message);
        let after = allocator.stats();
        assert_eq!(after.allocated_bytes.all.current, before.allocated_bytes.all.current, "nothing was counted for the failure");
        assert_eq!((after.num_alloc_retries, after.num_ooms), (before.num_alloc_retries + 1, before.num_ooms + 1));
        assert_eq!(arena.live.load(Ordering::Relaxed), 32 * MIB, "the retry released no live segment");
        allocator.free(a).unwrap();
        let c = allocator.malloc(40 * MIB, 1).unwrap(); // the retry releases a's free segment first
        assert_eq!(arena.live.load(Ordering::Relaxed), 42 * MIB);
        allocator.free(b).unwrap();
        allocator.free(c).unwrap();
        allocator.empty_cache();
        allocator.check_invariants().unwrap();
        assert_eq!(arena.live.load(Ordering::Relaxed), 0, "every segment went back through the user's free");
        assert!(arena.calls.load(Ordering::Relaxed) >= 4);
    }

    unsafe extern "C" fn misaligned_alloc(_size: usize, _device: c_int, _stream: *mut c_void, ctx: *mut c_void) -> *mut c_void {
        (*(ctx as *const Arena)).calls.fetch_add(1, Ordering::Relaxed);
        0x1000_0010 as *mut c_void
    }

    unsafe extern "C" fn count_free(_ptr: *mut c_void, _size: usize, _device: c_int, _stream: *mut c_void, ctx: *mut c_void) {
        (*(ctx as *const Arena)).live.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn a_misaligned_user_segment_is_refused_and_given_back() {
        let arena = Box::new(Arena { next: AtomicU64::new(0), budget: AtomicU64::new(0), live: AtomicU64::new(0), calls: AtomicU64::new(0) });
        let functions = UserFunctions { alloc: misaligned_alloc, free: count_free, context: &*arena as *const Arena as usize };
        let allocator = CachingAllocator::new(UserSource::new(functions, 0, HostSource::new(1 << 40)), AllocConfig::default());
        let err = allocator.malloc(4096, 1).unwrap_err();
        assert_eq!(err.status, Status::GPURT_ERROR_INVALID_ARGUMENT);
        assert!(err.message.contains("not aligned"), "{}", err.message);
        assert_eq!(arena.live.load(Ordering::Relaxed), arena.calls.load(Ordering::Relaxed), "each refused segment was freed");
        assert_eq!(allocator.stats().reserved_bytes.all.current, 0);
    }
}
