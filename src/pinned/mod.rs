//! Pinned host memory: caching pools over `cuMemHostAlloc` (`pool` holds the logic,
//! tested on host address ranges), a process-wide default pool, pools with their own
//! allocation flags, and registration of memory the caller owns.

pub mod ffi;
pub mod pool;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys;

use crate::alloc::pool::SegmentSource;
use crate::boundary::lock;
use crate::device;
use crate::driver::check;
use crate::error::{Error, Result};
use crate::handle::{Handle, HandleTable, Kind};
use crate::stream::{Origin, Stream, NATIVE_LEGACY};
use pool::PinnedPool;

/// Pinned pool flag: blocks are pinned for every device's context.
pub const GPURT_PINNED_PORTABLE: u32 = 1;
/// Pinned pool flag: blocks are mapped into the devices' address space (gpurt_pinned_device_pointer).
pub const GPURT_PINNED_DEVICE_MAPPED: u32 = 2;
/// Pinned pool flag: write-combined blocks: faster host-to-device copies, very slow host reads.
pub const GPURT_PINNED_WRITE_COMBINED: u32 = 4;

/// Page-locked host memory from the driver. A pinned block has no device of its own:
/// the streams that used it are remembered by `stream_id`, device and driver stream.
pub struct PinnedSource {
    flags: u32,
}

impl SegmentSource for PinnedSource {
    fn allocate(&self, size: u64, _stream: u64) -> Result<u64> {
        device::with_device(device::current()?, || {
            let mut ptr = std::ptr::null_mut();
            check(unsafe { sys::cuMemHostAlloc(&mut ptr, size as usize, self.flags) }, "cuMemHostAlloc")?;
            Ok(ptr as u64)
        })
    }
    fn release(&self, addr: u64, _size: u64) {
        if let Err(e) = check(unsafe { sys::cuMemFreeHost(addr as *mut _) }, "cuMemFreeHost") {
            crate::log::log(crate::log::Level::Error, &format!("releasing a cached pinned block: {e}"));
        }
    }
    fn record(&self, stream: u64) -> Result<u64> {
        crate::event::marker_record((stream >> DEVICE_SHIFT) as i32, stream & ((1 << DEVICE_SHIFT) - 1))
    }
    fn is_done(&self, marker: u64) -> bool {
        crate::event::marker_done(marker)
    }
    fn wait(&self, marker: u64) {
        crate::event::marker_wait(marker)
    }
    fn memory_info(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// Where a stream id keeps the device; a driver stream is a pointer below it.
const DEVICE_SHIFT: u32 = 56;

/// How pinned blocks remember a stream that used them: its device and driver stream,
/// not its handle, so that a block used on a stream destroyed since still frees
/// after that stream's queued work (gpurt keeps destroyed streams' driver streams).
/// The per-thread default stream is remembered as the legacy default stream: its
/// handle is one for every thread, the marker is recorded by whichever thread frees
/// the block, and the legacy stream follows the work queued so far on every thread's
/// per-thread stream.
fn stream_id(s: Stream) -> u64 {
    let raw = match s.origin() {
        Origin::PerThreadDefault => NATIVE_LEGACY,
        _ => s.raw as u64,
    };
    (s.device() as u64) << DEVICE_SHIFT | raw
}

type SharedPool = Arc<Mutex<PinnedPool<PinnedSource>>>;

/// Pool handles map to registry slots; the default pool is slot 0.
static HANDLES: HandleTable<u64> = HandleTable::new(Kind::PinnedPool);
static REGISTRY: Mutex<Vec<Option<SharedPool>>> = Mutex::new(Vec::new());
static DEFAULT: OnceLock<Handle> = OnceLock::new();

fn validate_flags(flags: u32) -> Result<()> {
    let known = GPURT_PINNED_PORTABLE | GPURT_PINNED_DEVICE_MAPPED | GPURT_PINNED_WRITE_COMBINED;
    if flags & !known != 0 {
        return Err(Error::invalid_argument(format!("unknown pinned pool flags {:#x}", flags & !known)));
    }
    Ok(())
}

/// A new pool whose blocks are allocated with `flags` (`GPURT_PINNED_*`).
pub fn create(flags: u32) -> Result<Handle> {
    validate_flags(flags)?;
    device::require_device()?;
    let pool = Arc::new(Mutex::new(PinnedPool::new(PinnedSource { flags })));
    let mut registry = lock(&REGISTRY);
    let slot = registry.iter().position(Option::is_none).unwrap_or(registry.len());
    let handle = HANDLES.insert(slot as u64)?;
    if slot == registry.len() {
        registry.push(None);
    }
    registry[slot] = Some(pool);
    Ok(handle)
}

/// The process-wide pool (portable, so that every device's context may use it).
pub fn default_pool() -> Result<Handle> {
    device::require_device()?;
    if let Some(h) = DEFAULT.get() {
        return Ok(*h);
    }
    let created = create(GPURT_PINNED_PORTABLE)?;
    let chosen = *DEFAULT.get_or_init(|| created);
    if chosen != created {
        destroy_slot(created)?;
    }
    Ok(chosen)
}

fn get(handle: Handle) -> Result<SharedPool> {
    let slot = HANDLES.get(handle)?;
    lock(&REGISTRY)[slot as usize].clone().ok_or_else(|| Error::invalid_handle("the pinned pool was destroyed"))
}

/// Destroys a pool with no blocks in use: its cache goes back to the driver, after
/// the work still using freed blocks is done.
pub fn destroy(handle: Handle) -> Result<()> {
    if DEFAULT.get() == Some(&handle) {
        return Err(Error::invalid_argument("the default pinned pool cannot be destroyed"));
    }
    let pool = get(handle)?;
    let in_use = lock(&pool).in_use();
    if in_use > 0 {
        return Err(Error::invalid_argument(format!("the pinned pool still has {in_use} blocks in use")));
    }
    destroy_slot(handle)
}

fn destroy_slot(handle: Handle) -> Result<()> {
    let slot = HANDLES.remove(handle)?;
    if let Some(pool) = lock(&REGISTRY)[slot as usize].take() {
        lock(&pool).drain();
    }
    Ok(())
}

pub fn malloc(pool: Handle, size: u64) -> Result<u64> {
    let pool = get(pool)?;
    let result = lock(&pool).malloc(size);
    result
}

/// Runs `f` on each pool until one answers (`f` gives `None` for a pool that does
/// not hold the pointer in question). Locks the registry, then each pool: the one
/// lock order used everywhere.
fn on_owner<T>(f: impl Fn(&mut PinnedPool<PinnedSource>) -> Option<T>) -> Option<T> {
    lock(&REGISTRY).iter().flatten().find_map(|p| f(&mut lock(p)))
}

fn not_pinned(ptr: u64) -> Error {
    Error::invalid_argument(format!("{ptr:#x} is not a live block of a gpurt pinned pool"))
}

pub fn free(ptr: u64) -> Result<()> {
    if ptr == 0 {
        return Ok(());
    }
    on_owner(|p| p.free(ptr)).unwrap_or_else(|| Err(not_pinned(ptr)))
}

/// Declares that `stream`'s work uses the pinned block containing `ptr`.
pub fn record_stream(ptr: u64, stream: Handle) -> Result<()> {
    let id = stream_id(crate::stream::get(stream)?);
    on_owner(|p| p.record_stream(ptr, id)).ok_or_else(|| not_pinned(ptr))
}

/// Records `stream` on the pinned block containing `ptr`, if there is one: what
/// gpurt's own copies do for every host pointer they touch.
pub fn note_use(ptr: u64, stream: Stream) {
    on_owner(|p| p.record_stream(ptr, stream_id(stream)));
}

/// The device address of a block from a device-mapped pool.
pub fn device_pointer(ptr: u64) -> Result<u64> {
    on_owner(|p| p.block_containing(ptr)).ok_or_else(|| not_pinned(ptr))?;
    let mut dptr = 0;
    device::with_device(device::current()?, || {
        check(unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dptr, ptr as *mut _, 0) }, "cuMemHostGetDevicePointer")
    })?;
    Ok(dptr)
}

pub fn with_pool<T>(pool: Handle, f: impl FnOnce(&mut PinnedPool<PinnedSource>) -> T) -> Result<T> {
    let pool = get(pool)?;
    let result = f(&mut lock(&pool));
    Ok(result)
}

/// gpurt_host_register flag: the memory is pinned for every context, not only the current one.
pub const GPURT_HOST_REGISTER_PORTABLE: u32 = 1;
/// gpurt_host_register flag: map the memory into the device's address space.
pub const GPURT_HOST_REGISTER_DEVICE_MAPPED: u32 = 2;
/// gpurt_host_register flag: the device only reads the memory.
pub const GPURT_HOST_REGISTER_READ_ONLY: u32 = 8;

/// Page-locks memory the caller owns (`cuMemHostRegister`).
pub fn host_register(ptr: u64, size: u64, flags: u32) -> Result<()> {
    let known = GPURT_HOST_REGISTER_PORTABLE | GPURT_HOST_REGISTER_DEVICE_MAPPED | GPURT_HOST_REGISTER_READ_ONLY;
    if flags & !known != 0 {
        return Err(Error::invalid_argument(format!("unknown host register flags {:#x}", flags & !known)));
    }
    if ptr == 0 || size == 0 {
        return Err(Error::invalid_argument("host_register needs a non-NULL pointer and a non-zero size"));
    }
    crate::boundary::check_range(ptr, size, "ptr")?;
    device::with_device(device::current()?, || {
        check(unsafe { sys::cuMemHostRegister_v2(ptr as *mut _, size as usize, flags) }, "cuMemHostRegister")
    })
}

pub fn host_unregister(ptr: u64) -> Result<()> {
    device::with_device(device::current()?, || check(unsafe { sys::cuMemHostUnregister(ptr as *mut _) }, "cuMemHostUnregister"))
}
