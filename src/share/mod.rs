//! Processes that share one GPU (issue #70): a group whose members give each other
//! memory on demand. Its registry holds the group together without a daemon
//! (`registry`); a member asks the others for what they offered and each one's server
//! thread answers (`requests`). The allocator asks through `alloc::reclaim`'s hook when
//! the device refuses it; not built yet: a member installing that hook and serving with
//! its pools, idle pools slept on request, the C API.

pub mod registry;
pub mod requests;
