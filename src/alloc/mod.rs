//! The caching device allocator: configuration (`config`), statistics (`stats`) and
//! the pool logic (`pool`, over the block arena and free lists of `blocks`), generic
//! over its segment source, so that it is tested on host address ranges (`host`) and
//! runs unchanged on the driver (`device`). `caching` shards pools by stream, and
//! `owners` maps each segment to its shard for frees from any thread.
//! `ffi` holds the C entry points, including PyTorch's and CuPy's pluggable
//! allocator signatures.

mod blocks;
pub mod caching;
pub mod config;
pub mod device;
pub mod ffi;
pub mod host;
mod owners;
pub mod pool;
pub mod stats;

#[cfg(test)]
mod tests;
