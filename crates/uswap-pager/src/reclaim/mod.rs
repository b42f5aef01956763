//! Reclaim: keeping a pager's charge (resident pages + swap cache + compressed pool) under its
//! limit, with kernel-style active and inactive lists.
//!
//! - The **active list** holds folios in the order they were mapped. Shrinking it takes the
//!   oldest folios, write-protects them (`UFFDIO_WRITEPROTECT`), copies them out and drops
//!   them with one `process_madvise(MADV_DONTNEED)` per batch. With the two-list policy the
//!   copy goes to the swap cache (the inactive list: unmapped but uncompressed, so a refault
//!   is a cheap `UFFDIO_COPY` that promotes the folio back); with FIFO it is compressed
//!   straight into the store.
//! - The **inactive list** is shrunk when the swap cache exceeds its share of the limit: the
//!   oldest cached folios are compressed into the store and their cache memory freed.
//! - The **protected list** holds folios that came back hot (a short refault distance): they
//!   reach the active list only once it holds more than its share of the resident pages.
//! - **Releasing** pages frees their swap entries and cache copies; a region is retired by
//!   taking it out of the registry, waiting until no thread is inside it, and releasing all
//!   its pages.
//!
//! The files, one role each, lowest layer first (after the kernel's split of `mm/vmscan.c`,
//! `mm/workingset.c` and `mm/swap_state.c`):
//!
//! - `lru`: the lists (`Ring`, `Protect`) and [`Lru`], which owns them and the workingset
//!   state (the pager's `lru`), the folio references they hold ([`entry`]), queuing a mapped
//!   folio ([`Lru::queue_mapped`]) and the protected list's balance.
//! - `workingset`: shadows, refault distance, whether a refault is hot ([`refault_is_hot`]),
//!   and the bypass of the inactive stage (`Workingset`).
//! - `swap`: storing a folio ([`store_folio`]) and the tags of clean swap-cache copies
//!   ([`clean_tags`]).
//! - `batch`: an eviction batch, its blocks and their destinations, and the pool of batches
//!   ([`BatchPool`]); the reclaim depth of this thread ([`IN_RECLAIM`]).
//! - `evict`: the eviction pipeline over a batch (select, write-protect, copy out, gate,
//!   drop, publish).
//! - `shrink`: one reclaim step (which list gives how much), [`direct_reclaim`] and
//!   [`evict_region`].
//! - `kswapd`: the background reclaimer ([`kswapd()`]) and its watermarks ([`wake_mark`]).
//! - `release`: releasing pages and retiring regions ([`release_pages`], [`retire_region`],
//!   [`free_unpublished`], [`forget_clean`]).
//!
//! Locking: each list is a preallocated circular buffer behind a tiny spinlock that is never
//! held across anything but the push/pop itself (so a signal handler cannot deadlock on it);
//! pages are claimed by CAS to `BUSY` (see [`crate::region`]). Nothing here allocates.
//! An eviction batch is taken from the [`BatchPool`] by CAS on a bit mask and returned on
//! drop; when all are in use an outermost reclaim waits for one (it holds no page or lock
//! then), and a reclaim nested in a fault inside this thread's own reclaim evicts nothing
//! instead (its outer level may hold the batch it would wait for).
//! Retiring a region waits for every thread inside the registry ([`region::enter`]), so it is
//! called with no lock held that such a thread may wait for.
//!
//! [`region::enter`]: crate::region::enter

mod batch;
mod evict;
mod kswapd;
mod lru;
mod release;
mod shrink;
mod swap;
mod workingset;

pub(crate) use batch::{BatchPool, IN_RECLAIM};
pub(crate) use kswapd::{kswapd, wake_mark, Kswapd};
pub(crate) use lru::{blocks, entry, Lru};
pub(crate) use release::{forget_clean, free_unpublished, release_pages, release_pages_ex, retire_region};
pub(crate) use shrink::{direct_reclaim, evict_region};
pub(crate) use swap::{ahead_pages, clean_tags, clear_clean_tags, store_failed, store_folio, TAG_AHEAD, TAG_CLEAN};
pub(crate) use workingset::{inactive_window, refault_is_hot};
