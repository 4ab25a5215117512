use std::time::Duration;

use libc::{c_char, c_int};

use super::member::{self, JoinOptions};
use super::registry::Offer;
use crate::boundary::{self, in_extended, in_str};
use crate::alloc::mempool::ffi::gpurt_mem_pool_t;
use crate::error::{gpurt_status_t, Error};
use crate::handle::Handle;

/// A share group member offers its cached free memory: when another member's
/// allocation is refused by the device, this process empties its caches on the device
/// (its default pool and the pools it created there), as gpurt_empty_cache would.
pub const GPURT_SHARE_OFFER_CACHED: c_int = 0;
/// A share group member offers nothing: it may ask the others, and is never asked.
pub const GPURT_SHARE_OFFER_NEVER: c_int = 1;
/// A share group member offers its cached free memory, then its pools on the device
/// (the default pool and those of gpurt_mem_pool_create) that have had no allocation
/// or free for options->idle_ms, put to sleep dropping their contents
/// (GPURT_SLEEP_DISCARD). Such a pool wakes at its next allocation from it, or at
/// gpurt_mem_pool_wake: use its blocks only after one of those.
pub const GPURT_SHARE_OFFER_SLEEP_DISCARD: c_int = 2;
/// As GPURT_SHARE_OFFER_SLEEP_DISCARD, but the pools' contents kept in host memory
/// (GPURT_SLEEP_OFFLOAD) and copied back by the wake.
pub const GPURT_SHARE_OFFER_SLEEP_OFFLOAD: c_int = 3;

/// Options of gpurt_share_join; initialise with GPURT_SHARE_OPTIONS_INIT (every field
/// zero: the defaults).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct gpurt_share_options_t {
    /// Set by the caller to sizeof the struct it was compiled with (the _INIT macro does): gpurt reads only that much.
    pub struct_size: usize,
    /// What the others may take from this process: a GPURT_SHARE_OFFER_* value; 0: GPURT_SHARE_OFFER_CACHED.
    pub offer: c_int,
    /// How long an allocation the device refuses waits for the others' answers, in ms; 0: 3 000.
    pub deadline_ms: u32,
    /// With GPURT_SHARE_OFFER_SLEEP_*: how long a pool must have had no allocation or free before the others may put it to sleep, in ms; 0: 1 000.
    pub idle_ms: u32,
    /// What this process's requests to the group leave free beside the memory refused, in MiB: the others are asked until the device has both, for this process's memory that does not come through gpurt (kernels loaded at their first launch, libraries' own workspaces); 0: 256.
    pub headroom_mib: u32,
}

/// Joins this process to share group `name` for `device`: processes of this user
/// that join the same name on the same GPU (whatever ordinal each sees it under) give
/// each other memory on demand. An allocation, a pool's growth or a wake on `device`
/// that the driver refuses, once this process's own cache is released, asks the
/// other members for what they offered (their cached free memory), waits for their
/// answers until the deadline, and is retried once: it succeeds, or fails as before.
/// The group is asked for the memory refused and options->headroom_mib more, left free
/// for what this process allocates outside gpurt (a CUDA kernel's module loads at its
/// first launch and takes device memory then).
/// The others give their cached free memory first; those that offered their idle
/// pools asleep (GPURT_SHARE_OFFER_SLEEP_*) are asked for those only if the device is
/// still short, and each puts its pools idle longest to sleep first, until it gave
/// what was wanted. A pool is never put to sleep while this process captures a stream
/// or while it holds a block exported to other processes; the sleep waits for the
/// device's work, as gpurt_mem_pool_sleep does.
/// A gpurt thread serves the others' requests until gpurt_share_leave or exit; a
/// member killed mid-request holds no one up past the deadline. No daemon: the group
/// is a file of mode 0600 under /dev/shm (GPURT_SHARE_DIR elsewhere) that only this
/// user may open (SECURITY.md).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param name the group's name: 1 to 64 letters, digits, '-', '_' or '.', not starting with '.'
/// @param options what this process offers and how long it waits; NULL: the defaults
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL or malformed name, an unknown offer, a device that does not exist or is in a group already; GPURT_ERROR_IO when the group's file cannot be opened or made, or is not this user's with mode 0600; GPURT_ERROR_OUT_OF_MEMORY when the group is full; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_share_join(device: c_int, name: *const c_char, options: *const gpurt_share_options_t) -> gpurt_status_t {
    boundary::call("gpurt_share_join", || {
        let name = in_str(name, "name")?;
        let join = match options.is_null() {
            true => JoinOptions::default(),
            false => {
                // SAFETY: the options are plain integers; `idle_ms` came after the first version.
                let o = unsafe { in_extended(options, std::mem::offset_of!(gpurt_share_options_t, idle_ms), "options", "GPURT_SHARE_OPTIONS_INIT")? };
                let offer = offer_of(o.offer).map_err(|e| e.context("`options->offer`"))?;
                JoinOptions::given(offer, o.deadline_ms, o.idle_ms, o.headroom_mib)
            }
        };
        member::join(device, name, join)
    })
}

/// What the share group may take from one pool, in place of its device's offer
/// (gpurt_share_join's options->offer): GPURT_SHARE_OFFER_NEVER keeps the pool whole,
/// GPURT_SHARE_OFFER_CACHED gives its cached free memory only, and
/// GPURT_SHARE_OFFER_SLEEP_DISCARD / _OFFLOAD also the pool put to sleep once it has had
/// no allocation or free for `idle_ms` (0: the device's). So an engine can offer its
/// weights' pool asleep with offload and keep its KV cache's pool awake. The pool's
/// device must be in a group; a later call for the same pool replaces the earlier.
///
/// @param pool a pool made with gpurt_mem_pool_create, or a device's default pool (gpurt_mem_pool_default); not a graph pool
/// @param offer a GPURT_SHARE_OFFER_* value
/// @param idle_ms with GPURT_SHARE_OFFER_SLEEP_*: how long the pool must be idle before the others may put it to sleep, in ms; 0: the device's idle period
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; GPURT_ERROR_INVALID_ARGUMENT for an unknown offer, a graph pool, or a pool whose device is in no share group; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_share_pool_offer(pool: gpurt_mem_pool_t, offer: c_int, idle_ms: u32) -> gpurt_status_t {
    boundary::call("gpurt_share_pool_offer", || {
        let idle = (idle_ms > 0).then(|| Duration::from_millis(idle_ms.into()));
        member::offer_pool(Handle::from_ptr(pool), offer_of(offer)?, idle)
    })
}

/// A GPURT_SHARE_OFFER_* value as an `Offer`.
fn offer_of(offer: c_int) -> Result<Offer, Error> {
    match offer {
        GPURT_SHARE_OFFER_CACHED => Ok(Offer::Cached),
        GPURT_SHARE_OFFER_NEVER => Ok(Offer::Never),
        GPURT_SHARE_OFFER_SLEEP_DISCARD => Ok(Offer::SleepDiscard),
        GPURT_SHARE_OFFER_SLEEP_OFFLOAD => Ok(Offer::SleepOffload),
        other => Err(Error::invalid_argument(format!("offer {other} is not a GPURT_SHARE_OFFER_* value"))),
    }
}

/// Leaves the share group `device` is in: this process's server stops and it is no
/// longer asked; its allocations no longer ask the others.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist or is in no group; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_share_leave(device: c_int) -> gpurt_status_t {
    boundary::call("gpurt_share_leave", || member::leave(device))
}
