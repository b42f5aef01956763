//! # uswap: a user-space swap engine
//!
//! The engine keeps pages that a pager evicted from memory and gives them back on a fault.
//! Its parts are named after the Linux `mm/` concepts they implement:
//!
//! - [`swap_table`]: the 8-byte word per slot that says everything about it (free, cached,
//!   zero, stored in which tier under which handle, swap count, group).
//! - [`cluster`]: the cluster allocator over a swap space (free / nonfull / frag / full /
//!   discard lists, per-order allocation of naturally aligned ranges, per-shard current
//!   cluster), and the per-cluster tables themselves.
//! - [`swap_cache`]: the resident copies of slots being swapped in or out; the single
//!   synchronization point for swap-in (add-or-get).
//! - [`vswap`]: the virtual swap layer, the [`Engine`](vswap::Engine) callers use. The entry a
//!   caller holds never changes when its data moves between tiers.
//! - [`backend`] and [`tier`]: where data lives (zero elision, compressed pool, swap file).
//! - [`group`]: groups with limits and counters (the memory cgroup analogue).
//! - [`fails`]: store failures by tier and kind (full, read-only, I/O), which the engine
//!   passes over for the next tier.
//! - [`stats`]: kernel-named counters, sharded so the hot path stays cheap.
//! - [`procfs`]: file work of uswap's own threads, in a descriptor table of its own.
//! - [`size`]: the one parser and printer of byte sizes (`1.5G`, `256MiB`, `50%`).
//! - [`page_heap`]: page-granular memory that goes back to the kernel when freed, at the bottom
//!   of the engine (the swap table, the cluster lists, the swap cache and the pool use it).
//!
//! `docs/design.md` in the repository is the contract between these parts (bit layout of the
//! table word, lock order, engine API).

pub mod backend;
pub mod cluster;
pub mod config;
pub mod error;
pub mod fails;
pub mod group;
pub mod page_heap;
pub mod procfs;
pub mod size;
pub mod stats;
pub mod swap_cache;
pub mod swap_table;
pub mod sync;
pub mod tier;
pub mod vswap;

pub use error::{SwapError, TierError};

/// Make this thread's per-thread engine state now rather than on its first swap-in or free:
/// its registration with the swap table's epoch collector and the pool's decoding state. A
/// thread that serves faults calls it when it starts, so that the fault path allocates
/// nothing even the first time. (A program thread whose fault is served in a SIGBUS handler
/// makes this state on its first fault: in SIGBUS mode, call this in every thread that may
/// fault, or take the first allocation as the price.)
pub fn prepare_thread() {
    #[cfg(not(loom))]
    drop(crossbeam_epoch::pin());
    tier::zpool::prepare_thread();
}
pub use swap_table::{SwapEntry, PAGE_SIZE, SLOTS_PER_CLUSTER};
