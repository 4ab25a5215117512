//! Processes that share one GPU (issue #70): a group whose members give each other
//! memory on demand. This is its registry, the part that holds the group together
//! without a daemon (`registry`); reclaiming between members is not built yet.

pub mod registry;
