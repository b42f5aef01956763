//! Storage tiers behind the [`Backend`](crate::backend::Backend) trait.
//!
//! - `zero`: zero-page detection (nothing is stored for an all-zero page).
//! - [`zpool`]: the compressed RAM pool (zswap/zram in user space) with a zsmalloc-like
//!   size-class allocator, a size limit with hysteresis, and compaction; its memory comes
//!   from the page heap ([`pages`]), which gives freed pages back to the kernel.
//! - [`file`](mod@file): the swap file or block device, with the cluster allocator over its physical
//!   slots, pluggable I/O engines (`io_engine`) and AES-256-GCM at rest (`crypt`); its
//!   on-disk header and the checks that keep it off files and devices in use (`swapfile`);
//!   its clusters' holds across the processes of a tree that share it after `fork` ([`holds`]).
//! - [`shared`]: memory shared with `fork` descendants (the nonce counter, the holds).
//!
//! Every tier locks only its own internal state (lock order: the engine's cluster lock, then
//! a tier's internal locks); compression, encryption and I/O run outside any tier lock except
//! the per-ring lock of the io_uring engine.

pub(crate) mod crypt;
pub(crate) mod drop_behind;
pub mod file;
pub mod holds;
pub(crate) mod io_engine;
pub(crate) mod lz4;
pub(crate) mod records;
pub mod shared;
pub(crate) mod swapfile;
pub(crate) mod zero;
pub mod zpool;

pub mod pages {
    //! The page heap's process-wide parts at their public path (`uswap::tier::pages`): the
    //! heap itself, `MADV_DONTNEED` over many ranges, and the process descriptor it releases
    //! pages through. The page heap lives at the bottom of the engine (`crate::page_heap`)
    //! because the swap table, the cluster lists and the swap cache use it too.
    //!
    //! Locking: none (re-exports only).

    pub use crate::page_heap::{dontneed, heap, prime_pidfd, PageHeap, ProcessFd};
}
