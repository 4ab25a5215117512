//! The caching device allocator: configuration (`config`), statistics (`stats`) and
//! the pool logic (`pool`, over the block arena and free lists of `blocks`), generic
//! over its segment source, so that it is tested on host address ranges (`host`) and
//! runs unchanged on the driver (`device`). `caching` shards pools by stream, and
//! `owners` maps each segment to its shard for frees from any thread. `mempool` adds
//! the pools users create beside each device's default one, and per-thread routing;
//! `upstream` where their segments come from.
//! `ffi` holds the C entry points, including PyTorch's and CuPy's pluggable
//! allocator signatures.

mod blocks;
pub mod capture;
pub mod caching;
pub mod config;
pub mod device;
pub mod driver_pool;
pub mod ffi;
pub mod history;
pub mod host;
pub mod mempool;
mod owners;
pub mod pool;
pub mod reclaim;
pub mod snapshot;
pub mod stats;
pub mod upstream;

#[cfg(test)]
mod tests;
