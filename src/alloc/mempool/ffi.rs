use libc::{c_char, c_int, c_void};

use super::device::{self as pools, Upstream};
use super::{sleep, Filter};
use crate::alloc::upstream::{gpurt_upstream_alloc_fn, gpurt_upstream_free_fn, UserFunctions};
use crate::alloc::stats::{gpurt_memory_stats_t, MEMORY_STATS_V1_SIZE};
use crate::boundary::{self, in_sized, in_str, write_sized, Out};
use crate::error::{gpurt_status_t, Error};
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// A memory pool: a device's default caching pool, or one made with
/// gpurt_mem_pool_create (torch.cuda.MemPool, cupy.cuda.MemoryPool).
pub struct gpurt_mem_pool_s {
    _opaque: [u8; 0],
}
/// The handle of a memory pool: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_mem_pool_t = *mut gpurt_mem_pool_s;

/// Upstream of a pool: segments from cuMemAlloc (or expandable segments, as the
/// pool's configuration says), as the default pools take them.
pub const GPURT_UPSTREAM_DRIVER: c_int = 0;
/// Upstream of a pool: managed memory (cuMemAllocManaged, GPURT_MEM_ATTACH_GLOBAL);
/// plain segments only.
pub const GPURT_UPSTREAM_MANAGED: c_int = 2;
/// Upstream of a pool: segments from the driver's stream-ordered pool
/// (cuMemAllocFromPoolAsync on the device's current memory pool, which other
/// libraries may share), cached by gpurt; plain segments only.
pub const GPURT_UPSTREAM_ASYNC: c_int = 3;
/// Upstream of a pool: segments from the options' user_alloc / user_free (an arena
/// of the caller's, a NUMA-aware allocator, RMM), cached by gpurt; plain segments only.
pub const GPURT_UPSTREAM_USER: c_int = 1;

/// Options of gpurt_mem_pool_create; initialise with GPURT_MEM_POOL_OPTIONS_INIT.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct gpurt_mem_pool_options_t {
    /// Set by the caller to sizeof the struct it was compiled with (the _INIT macro does): gpurt fills only that much.
    pub struct_size: usize,
    /// Where the pool's segments come from: GPURT_UPSTREAM_DRIVER, _ASYNC, _MANAGED or _USER.
    pub upstream: c_int,
    /// Options with GPURT_ALLOC_CONF's syntax for this pool alone, over the process's
    /// configuration as it is at creation (NULL: that configuration). A pool's own key:
    /// `use_on_oom:True` (torch.cuda.MemPool's): an allocation elsewhere on the device
    /// (the default pool, another pool) that runs out of memory is served from this
    /// pool as a last resort, outside captures; the block is this pool's.
    /// `no_split:True` (torch.cuda.MemPool's): no block is ever split, so each
    /// allocation has a segment of its own (whole segments, mapped in the size the
    /// request needs rounded to 2 MiB), reused whole by a later request at most 20 MiB
    /// smaller: for memory registered per allocation (NCCL's symmetric memory).
    pub config: *const c_char,
    /// The most bytes the pool may reserve (cupy's set_limit); 0: no limit.
    pub limit_bytes: u64,
    /// GPURT_UPSTREAM_USER: returns `size` bytes of device memory on `device`, aligned
    /// to 512 bytes, for first use on `stream` (a CUstream), or NULL; called only
    /// when the pool needs a new segment, from any thread, with the pool locked: it
    /// must not allocate or free through gpurt.
    pub user_alloc: gpurt_upstream_alloc_fn,
    /// GPURT_UPSTREAM_USER: gives back a segment user_alloc returned (its size
    /// again; `stream` NULL: the memory is idle).
    pub user_free: gpurt_upstream_free_fn,
    /// Passed to user_alloc and user_free as their last argument.
    pub user_context: *mut c_void,
}

/// Initialises `options` for this version of the header: sets `struct_size`, the
/// driver upstream, no configuration of its own, no limit.
///
/// @param[out] options receives the defaults for this header's version; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_options_init(options: *mut gpurt_mem_pool_options_t) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_mem_pool_options_init", || {
        let size = std::mem::size_of::<gpurt_mem_pool_options_t>();
        Out::new(options, "options")?.write(gpurt_mem_pool_options_t {
            struct_size: size,
            upstream: GPURT_UPSTREAM_DRIVER,
            config: std::ptr::null(),
            limit_bytes: 0,
            user_alloc: None,
            user_free: None,
            user_context: std::ptr::null_mut(),
        });
        Ok(())
    })
}

fn h(pool: gpurt_mem_pool_t) -> Handle {
    Handle::from_ptr(pool)
}

/// A new pool on `device` (`GPURT_CURRENT_DEVICE`: the current one), with its own
/// segments, cache, statistics and options (NULL: defaults). Its memory is freed
/// with gpurt_free like any other; destroy it when it holds no live allocation.
/// Only the driver upstream maps memory, on a device with virtual memory management:
/// a pool over another source takes whole segments when the process's configuration
/// asks for expandable segments.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param options the pool's upstream, configuration (GPURT_ALLOC_CONF's syntax) and byte limit; NULL: the defaults
/// @param[out] pool receives the new pool; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_INVALID_ARGUMENT for an unknown upstream, a malformed configuration, a user upstream without both functions, or the pool's own configuration asking expandable_segments:True of an upstream or a device that cannot map; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_create(device: c_int, options: *const gpurt_mem_pool_options_t, pool: *mut gpurt_mem_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_create", || {
        let out = Out::new(pool, "pool")?;
        let (config, limit, upstream) = match options.is_null() {
            true => (None, 0, Upstream::Driver),
            false => {
                let o = *in_sized(options, "options", "GPURT_MEM_POOL_OPTIONS_INIT")?;
                let upstream = match (o.upstream, o.user_alloc, o.user_free) {
                    (GPURT_UPSTREAM_DRIVER, _, _) => Upstream::Driver,
                    (GPURT_UPSTREAM_MANAGED, _, _) => Upstream::Managed,
                    (GPURT_UPSTREAM_ASYNC, _, _) => Upstream::Async,
                    (GPURT_UPSTREAM_USER, Some(alloc), Some(free)) => Upstream::User(UserFunctions { alloc, free, context: o.user_context as usize }),
                    (GPURT_UPSTREAM_USER, _, _) => {
                        return Err(Error::invalid_argument("GPURT_UPSTREAM_USER needs `options->user_alloc` and `options->user_free`"))
                    }
                    (other, _, _) => return Err(Error::invalid_argument(format!("`options->upstream` is {other}: not a GPURT_UPSTREAM_* value"))),
                };
                let config = (!o.config.is_null()).then(|| in_str(o.config, "options->config")).transpose()?;
                (config, o.limit_bytes, upstream)
            }
        };
        out.write(pools::create(device, config, limit, upstream)?.to_ptr());
        Ok(())
    })
}

/// Destroys a pool made with gpurt_mem_pool_create. Refused, changing nothing,
/// while it holds live allocations (the message says how many), a thread has it
/// pushed, a graph or exec captured into it (gpurt_stream_begin_capture_shared)
/// lives, or its owner put it to sleep (wake it first; one a share group keeps asleep
/// is given back without a wake); its cached memory and the host memory kept for its
/// offloads go back.
///
/// @param pool a pool from gpurt_mem_pool_create
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; GPURT_ERROR_INVALID_ARGUMENT for a default pool, or while the pool holds live allocations, is pushed on a thread, keeps memory for graphs, or sleeps by its owner's gpurt_mem_pool_sleep or gpurt_device_sleep (nothing changes); or a status every call may give (@ref statuses).
/// @par Ordering
/// Returns wholly free cached memory to the driver, which waits for the device where that memory may still be in use (cuMemFree, cuMemUnmap); blocks whose freeing streams have not passed their recorded events stay cached. Not allowed while a stream is being captured in global mode.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_destroy(pool: gpurt_mem_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_destroy", || pools::destroy(h(pool)))
}

/// The handle of `device`'s default pool (the same at every call; never destroyed).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] pool receives the handle of the device's default pool; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_default(device: c_int, pool: *mut gpurt_mem_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_default", || {
        let out = Out::new(pool, "pool")?;
        out.write(pools::default_handle(device)?.to_ptr());
        Ok(())
    })
}

/// Allocates `size` bytes from `pool` for use on `stream`, which must be on the
/// pool's device; otherwise as gpurt_malloc. Free with gpurt_free.
///
/// @param pool the pool to allocate from
/// @param size bytes wanted, as for gpurt_malloc
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one) on the pool's device
/// @param[out] ptr receives the block's device address; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool` or `stream`; GPURT_ERROR_INVALID_ARGUMENT for a stream of another device; GPURT_ERROR_OUT_OF_MEMORY when the pool's upstream or limit refuses; or a status every call may give (@ref statuses).
/// @par Ordering
/// As gpurt_malloc.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_malloc(pool: gpurt_mem_pool_t, size: usize, stream: gpurt_stream_t, ptr: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_malloc", || {
        let out = Out::new(ptr, "ptr")?;
        let s = crate::stream::get(Handle::from_ptr(stream))?;
        out.write(pools::malloc(h(pool), size as u64, s.device(), s.raw as u64)? as *mut c_void);
        Ok(())
    })
}

/// Until the matching gpurt_mem_pool_pop, this thread's allocations on the pool's
/// device (gpurt_malloc, gpurt_malloc_device, gpurt_malloc_native and the PyTorch
/// and CuPy entry points) come from `pool` (torch.cuda.use_mem_pool). Pushes nest;
/// pushing a default pool routes back to it. A capture's private pool still wins.
///
/// @param pool the pool this thread's allocations on its device come from until gpurt_mem_pool_pop
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_push(pool: gpurt_mem_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_push", || pools::push(h(pool), None))
}

/// `int accepts(size_t size, int device, void *stream, void *context)`: nonzero
/// when the pushed pool should serve this allocation (`stream`: a CUstream).
pub type gpurt_mem_pool_filter_fn = Option<unsafe extern "C" fn(usize, c_int, *mut c_void, *mut c_void) -> c_int>;

/// As gpurt_mem_pool_push, for the allocations `filter` accepts (called at each
/// allocation on the pool's device, on the allocating thread, with `context`; it
/// must not push or pop pools); the others go where they would without this entry
/// (torch's MemPool with a routing allocator). Undone by gpurt_mem_pool_pop.
///
/// @param pool the pool the accepted allocations come from
/// @param filter `int filter(size_t size, int device, void *stream, void *context)`: non-zero routes the allocation to `pool`; must not be NULL
/// @param context passed to `filter` unchanged
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; GPURT_ERROR_INVALID_ARGUMENT if `filter` is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_push_filtered(pool: gpurt_mem_pool_t, filter: gpurt_mem_pool_filter_fn, context: *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_push_filtered", || {
        let accepts = filter.ok_or_else(|| Error::invalid_argument("argument `filter` is NULL: use gpurt_mem_pool_push"))?;
        pools::push(h(pool), Some(Filter { accepts, context: context as usize }))
    })
}

/// Undoes this thread's last gpurt_mem_pool_push.
///
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT when this thread has no pool pushed; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_pop() -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_pop", pools::pop)
}

/// The pool's own statistics (for a default pool: without the other pools, which
/// gpurt_memory_stats adds up), into a struct initialised with GPURT_MEMORY_STATS_INIT.
///
/// @param pool the pool
/// @param stats a struct initialised with GPURT_MEMORY_STATS_INIT
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if `stats` is NULL or too small; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_stats(pool: gpurt_mem_pool_t, stats: *mut gpurt_memory_stats_t) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_stats", || {
        let value = pools::stats(h(pool))?;
        write_sized(stats, &value, MEMORY_STATS_V1_SIZE, "stats")
    })
}

/// cupy's MemoryPool figures: bytes in live allocations (used_bytes), cached free
/// bytes (free_bytes), all bytes held (total_bytes) and free cached blocks
/// (n_free_blocks); any pointer may be NULL.
///
/// @param pool the pool
/// @param[out] used_bytes receives bytes in live allocations; may be NULL
/// @param[out] free_bytes receives bytes cached free; may be NULL
/// @param[out] total_bytes receives all bytes held from the upstream; may be NULL
/// @param[out] free_blocks receives the number of free cached blocks; may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_usage(
    pool: gpurt_mem_pool_t,
    used_bytes: *mut u64,
    free_bytes: *mut u64,
    total_bytes: *mut u64,
    free_blocks: *mut u64,
) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_usage", || {
        let u = pools::usage(h(pool))?;
        boundary::write_optional([(used_bytes, u.used), (free_bytes, u.free), (total_bytes, u.total), (free_blocks, u.free_blocks)]);
        Ok(())
    })
}

/// Releases the pool's wholly free cached segments (cupy's free_all_blocks).
///
/// @param pool the pool
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Returns wholly free cached memory to the driver, which waits for the device where that memory may still be in use (cuMemFree, cuMemUnmap); blocks whose freeing streams have not passed their recorded events stay cached. Not allowed while a stream is being captured in global mode.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_empty_cache(pool: gpurt_mem_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_empty_cache", || pools::empty_cache(h(pool)))
}

/// The device the pool serves.
///
/// @param pool the pool
/// @param[out] device receives its device ordinal; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_get_device(pool: gpurt_mem_pool_t, device: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_get_device", || {
        let out = Out::new(device, "device")?;
        out.write(pools::device_of(h(pool))?);
        Ok(())
    })
}

/// How a pool sleeps (gpurt_mem_pool_sleep): GPURT_SLEEP_OFFLOAD or GPURT_SLEEP_DISCARD.
pub type gpurt_sleep_mode_t = c_int;
/// Sleep mode: the pool's contents are copied to pinned host memory and copied back
/// on wake (vLLM's sleep level 1, for weights).
pub const GPURT_SLEEP_OFFLOAD: gpurt_sleep_mode_t = 0;
/// Sleep mode: the pool's contents are dropped; after wake its blocks hold
/// undefined bytes (vLLM's sleep level 2, for a KV cache).
pub const GPURT_SLEEP_DISCARD: gpurt_sleep_mode_t = 1;

/// Puts `pool` to sleep: from the call's start allocations from it are refused; it
/// waits for the device's work, completes its deferred frees and releases its wholly
/// free memory, with GPURT_SLEEP_OFFLOAD copies the bytes of its live blocks (not its
/// free memory) to pinned host memory, then unmaps all of its memory, giving the
/// physical memory back to the driver. Its blocks keep their addresses (reserved, not
/// backed): after gpurt_mem_pool_wake every pointer is valid again, so CUDA graphs
/// that use them replay. While it sleeps or falls asleep, allocations from it fail and
/// frees of its blocks work; gpurt_mem_pool_stats, gpurt_mem_pool_is_asleep and frees
/// do not wait for the sleep's synchronisation or copies, so a host function
/// (gpurt_stream_launch_host_func) may call them during a sleep.
/// Only memory of expandable segments can sleep (the default; not under `expandable_segments:False` in the
/// process's configuration or the pool's own); a pool holding a block in a segment
/// of its own refuses, naming the block, as does a pool holding a block exported to
/// other processes (gpurt_ipc_mem_handle), whose memory they map; of an export and a
/// sleep made at once, one is refused. gpurt's copies,
/// memsets, fills, elementwise kernels, GDS transfers and exports of a sleeping
/// pool's blocks are refused. The host memory of an offload is kept after the wake
/// for the next sleep (`offload_host_bytes` in the statistics; a shard of the pool
/// keeps at most its last offload's size, and gpurt_mem_pool_empty_cache gives it
/// back). A failure leaves the pool awake, as it was; where the driver refuses to
/// unmap part of the memory, the parts unmapped before are mapped again, their
/// contents restored with GPURT_SLEEP_OFFLOAD (with GPURT_SLEEP_DISCARD those parts'
/// contents are lost, as asked).
///
/// @param pool the pool: a default pool, one made with gpurt_mem_pool_create, or a graph pool (graphs captured into it replay after the wake)
/// @param mode GPURT_SLEEP_OFFLOAD or GPURT_SLEEP_DISCARD
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; GPURT_ERROR_INVALID_ARGUMENT for an unknown `mode` or a pool already asleep; GPURT_ERROR_NOT_SUPPORTED for a pool that cannot sleep (a block in a segment of its own, a block exported to other processes, the driver's pool, an upstream that cannot map); GPURT_ERROR_OUT_OF_MEMORY where the host memory for the offload cannot be had; GPURT_ERROR_STREAM_CAPTURE while a capture begun with gpurt_stream_begin_capture is in progress (the message names it; captures begun meanwhile wait for the sleep); or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocking: synchronises the pool's device, then copies and unmaps. Refused while a stream is being captured through gpurt.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_sleep(pool: gpurt_mem_pool_t, mode: gpurt_sleep_mode_t) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_sleep", || sleep::sleep(h(pool), offloads(mode)?))
}

/// Whether a sleep mode offloads.
fn offloads(mode: gpurt_sleep_mode_t) -> Result<bool, Error> {
    match mode {
        GPURT_SLEEP_OFFLOAD => Ok(true),
        GPURT_SLEEP_DISCARD => Ok(false),
        _ => Err(Error::invalid_argument(format!("sleep mode {mode}: give GPURT_SLEEP_OFFLOAD or GPURT_SLEEP_DISCARD"))),
    }
}

/// Wakes a sleeping `pool`: its memory is mapped again at the same addresses and,
/// if it slept with GPURT_SLEEP_OFFLOAD, its contents copied back. A failure (the
/// device out of memory, say) leaves it asleep, as it was, for a retry.
///
/// @param pool the pool
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; GPURT_ERROR_INVALID_ARGUMENT for a pool that is not asleep; GPURT_ERROR_OUT_OF_MEMORY when the device's memory does not suffice; GPURT_ERROR_STREAM_CAPTURE while a capture begun with gpurt_stream_begin_capture is in progress; or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocking: maps and copies, and returns when the contents are back; frees, statistics and gpurt_mem_pool_is_asleep do not wait for it.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_wake(pool: gpurt_mem_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_wake", || sleep::wake(h(pool)))
}

/// Says that work is about to use `pool`'s memory without allocating from it (an
/// engine's kernels reading weights it allocated long ago): call it before such work.
/// In a share group (gpurt_share_join) the pool then counts as used, so that the
/// others do not find it idle, and a pool their request put to sleep
/// (GPURT_SHARE_OFFER_SLEEP_*) wakes first, with its contents per the offer, waiting
/// for such a sleep under way; without it, work on a pool asleep that way reads
/// unmapped memory. Outside a group it only counts: a few nanoseconds.
///
/// @param pool the pool: a default pool, one made with gpurt_mem_pool_create, or a graph pool
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; GPURT_ERROR_INVALID_ARGUMENT for a pool its owner put to sleep (gpurt_mem_pool_sleep, gpurt_device_sleep: wake it first); GPURT_ERROR_OUT_OF_MEMORY when the wake finds too little device memory, after asking the group; GPURT_ERROR_STREAM_CAPTURE for a wake while a capture begun with gpurt_stream_begin_capture is in progress; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only where the pool is awake; a wake maps and copies, as gpurt_mem_pool_wake, and returns when the contents are back.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_touch(pool: gpurt_mem_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_touch", || sleep::touch(h(pool)))
}

/// Whether `pool` sleeps (gpurt_mem_pool_sleep). Never waits for a sleep or a wake
/// in progress: a pool falling asleep reads 0 until its sleep succeeded, a pool waking
/// reads 1 until its wake did.
///
/// @param pool the pool
/// @param[out] asleep receives 1 while it sleeps, else 0; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_is_asleep(pool: gpurt_mem_pool_t, asleep: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_is_asleep", || {
        let out = Out::new(asleep, "asleep")?;
        out.write(sleep::is_asleep(h(pool))? as c_int);
        Ok(())
    })
}

/// Makes now, ahead of a sleep, the pinned host memory the pool's next
/// GPURT_SLEEP_OFFLOAD needs for what it holds (an eighth more, for growth), kept for
/// that sleep as an earlier offload's memory is (`offload_host_bytes`). A first offload
/// otherwise spends most of its time making it (docs/sleep.md); call this where a
/// stall costs nothing, after loading a model. Memory kept already that is large
/// enough stays; gpurt_mem_pool_empty_cache gives it back.
///
/// @param pool a pool that can sleep (a default pool, one from gpurt_mem_pool_create, a graph pool)
/// @param[out] host_bytes receives the bytes of host memory made; may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; GPURT_ERROR_INVALID_ARGUMENT for a pool asleep; GPURT_ERROR_NOT_SUPPORTED for a pool that cannot sleep; GPURT_ERROR_OUT_OF_MEMORY where the host memory cannot be had (what was made for other shards is kept); or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side: does not wait for the device.
#[no_mangle]
pub extern "C" fn gpurt_mem_pool_sleep_prepare(pool: gpurt_mem_pool_t, host_bytes: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_mem_pool_sleep_prepare", || {
        let made = sleep::prepare(h(pool))?;
        boundary::write_optional([(host_bytes.cast::<u64>(), made)]);
        Ok(())
    })
}

/// gpurt_mem_pool_sleep_prepare for every pool of `device` that is awake: the next
/// gpurt_device_sleep with GPURT_SLEEP_OFFLOAD copies at once.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] host_bytes receives the bytes of host memory made; may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_NOT_SUPPORTED under backend:cudaMallocAsync; GPURT_ERROR_OUT_OF_MEMORY where the host memory cannot be had (what was made is kept); or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side: does not wait for the device.
#[no_mangle]
pub extern "C" fn gpurt_device_sleep_prepare(device: c_int, host_bytes: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_device_sleep_prepare", || {
        let made = sleep::prepare_device(device)?;
        boundary::write_optional([(host_bytes.cast::<u64>(), made)]);
        Ok(())
    })
}

/// Puts to sleep everything gpurt holds on `device` that is awake: its default pool
/// (with the cuBLAS and cuBLASLt workspaces, which come from it), every pool made with
/// gpurt_mem_pool_create on it and every graph pool of it (graphs captured into them
/// replay after the wake), each as gpurt_mem_pool_sleep does, in `mode`. A pool the
/// caller put to sleep before keeps its own mode and stays asleep after
/// gpurt_device_wake, which wakes what this call put to sleep. A failure (a pool
/// holding a block in a segment of its own or a block exported to other processes, a
/// driver call) wakes the pools it had put to sleep, so that the device is as it was;
/// the message names the pool. The local memory launches grew goes back too (the
/// stack size limit set back to what the context had when gpurt first used it; the
/// wake restores it). Math-library handles work again after the wake. What stays on
/// the device: the CUDA context, loaded kernels and the math libraries' handles (a
/// cuBLAS handle keeps cuBLAS's own 64 MiB workspace pool on an H200; docs/sleep.md).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param mode GPURT_SLEEP_OFFLOAD or GPURT_SLEEP_DISCARD
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist, an unknown `mode`, or a device asleep already; GPURT_ERROR_NOT_SUPPORTED for a pool that cannot sleep (named), and under backend:cudaMallocAsync; GPURT_ERROR_OUT_OF_MEMORY where the host memory for an offload cannot be had; GPURT_ERROR_STREAM_CAPTURE while a capture begun with gpurt_stream_begin_capture is in progress; or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocking: synchronises the device, then copies and unmaps pool by pool. Refused while a stream is being captured through gpurt.
#[no_mangle]
pub extern "C" fn gpurt_device_sleep(device: c_int, mode: gpurt_sleep_mode_t) -> gpurt_status_t {
    boundary::call("gpurt_device_sleep", || sleep::sleep_device(device, offloads(mode)?))
}

/// Wakes what gpurt_device_sleep put to sleep on `device`, the last pool first; pools
/// the caller woke meanwhile are left as they are. A failure (the device out of memory,
/// say) leaves the pools not yet woken asleep and the device asleep, for a retry.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist or is not asleep; GPURT_ERROR_OUT_OF_MEMORY when the device's memory does not suffice; GPURT_ERROR_STREAM_CAPTURE while a capture begun with gpurt_stream_begin_capture is in progress; or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocking: maps and copies, and returns when the contents are back.
#[no_mangle]
pub extern "C" fn gpurt_device_wake(device: c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_wake", || sleep::wake_device(device))
}

/// Whether gpurt_device_sleep put `device` to sleep and gpurt_device_wake has not yet
/// woken it.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] asleep receives 1 while it sleeps, else 0; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL or for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_device_is_asleep(device: c_int, asleep: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_device_is_asleep", || {
        let out = Out::new(asleep, "asleep")?;
        out.write(sleep::device_is_asleep(device)? as c_int);
        Ok(())
    })
}
