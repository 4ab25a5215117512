//! Processes that share one GPU (issue #70): a group whose members give each other
//! memory on demand. Its registry holds the group together without a daemon
//! (`registry`); a member asks the others for what they offered and each one's server
//! thread answers (`requests`). The allocator asks through `alloc::reclaim`'s hook when
//! the device refuses it; a member (`member`) installs that hook and serves with its
//! device's caches and, where it offered them, its idle pools put to sleep (the
//! longest idle asked first); `GPURT_ALLOC_CONF=share:NAME` joins as each device's
//! default pool is made.

pub mod ffi;
pub mod member;
pub mod registry;
pub mod requests;

pub use member::join_configured;
