//! The caching device allocator (in progress): configuration, statistics and the
//! pool logic, generic over its segment source so that it is tested on host address
//! ranges (`host`) and runs unchanged on the driver. Not yet exported through the C
//! ABI: the driver segment source, the per-thread front cache and the C entry points
//! come next (see the notes).

pub mod config;
pub mod host;
pub mod pool;
pub mod stats;

#[cfg(test)]
mod tests;
