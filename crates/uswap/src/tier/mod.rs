//! Storage tiers behind the [`Backend`](crate::backend::Backend) trait.
//!
//! - [`zero`]: zero-page detection (nothing is stored for an all-zero page).
//! - [`zpool`]: the compressed RAM pool (zswap/zram in user space) with a zsmalloc-like
//!   size-class allocator, a size limit with hysteresis, and compaction; its memory comes
//!   from the page heap ([`crate::page_heap`], also at its old path `tier::pages`), which
//!   gives freed pages back to the kernel.
//! - [`file`](mod@file): the swap file or block device, with the cluster allocator over its physical
//!   slots, pluggable I/O engines ([`io_engine`]) and AES-256-GCM at rest ([`crypt`]); its
//!   on-disk header and the checks that keep it off files and devices in use ([`swapfile`]);
//!   its clusters' holds across the processes of a tree that share it after `fork` ([`holds`]).
//! - [`shared`]: memory shared with `fork` descendants (the nonce counter, the holds).
//!
//! Every tier locks only its own internal state (lock order: the engine's cluster lock, then
//! a tier's internal locks); compression, encryption and I/O run outside any tier lock except
//! the per-ring lock of the io_uring engine.

pub mod crypt;
pub mod drop_behind;
pub mod file;
pub mod holds;
pub mod io_engine;
pub mod lz4;
pub mod records;
pub mod shared;
pub mod swapfile;
pub mod zero;
pub mod zpool;

pub use zero::is_zero;

/// The page heap at its old path (`uswap::tier::pages`); it lives at the bottom of the engine
/// ([`crate::page_heap`]) because the swap table, the cluster lists and the swap cache use it
/// too.
pub use crate::page_heap as pages;
