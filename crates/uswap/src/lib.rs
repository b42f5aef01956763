//! # uswap: a user-space swap engine
//!
//! The engine keeps pages that a pager evicted from memory and gives them back on a fault.
//!
//! ## Public API
//!
//! What the other crates of the workspace (the pager, the C ABI and preload library, the
//! command) use. Everything else is crate-private: the crate warns on a `pub` item that the
//! root does not reach (`unreachable_pub`).
//!
//! - [`Engine`] (module [`vswap`]): the engine: swap out, swap in, dup and put entries, move
//!   their data between tiers; the entry a caller holds never changes when its data moves.
//! - [`EngineConfig`], [`FragPolicy`]: the engine's configuration, and how its allocator
//!   searches fragment clusters.
//! - [`Location`]: where an entry's data lives (for tests and reports).
//! - [`TiersConfig`], [`TierSpec`] (module [`config`]): the tier configuration: a `--tiers`
//!   string parsed into tiers, and the tiers built from it.
//! - [`Backend`], [`TierKind`], [`ShareStep`] (module [`backend`]): the trait every tier
//!   implements, the kinds of tier, the steps of sharing a file tier across `fork`.
//! - [`tier::zpool`], [`tier::file`]: the tiers the configuration builds (the compressed pool,
//!   the swap file or block device) and their configurations.
//! - [`tier::pages`], [`tier::shared`], [`tier::holds`]: the process-wide parts the pager and
//!   the preload library use too (the page heap, memory shared with `fork` descendants, a
//!   process's start time).
//! - [`Stats`], [`Event`] (module [`stats`]): the engine's kernel-named counters.
//! - [`FailCounts`], [`FailKind`] (module [`fails`]): store failures of a tier by kind.
//! - [`size`]: the one parser and printer of byte sizes (`1.5G`, `256MiB`, `50%`).
//! - [`SwapEntry`], [`PAGE_SIZE`], [`SLOTS_PER_CLUSTER`], [`MAX_ORDER`]: a swap entry and the
//!   sizes of the swap space.
//! - [`SwapError`], [`TierError`]: the errors of the engine and of a tier.
//! - [`FaultScope`]: marks the code that resolves a page fault, for the lock accounting.
//! - [`prepare_thread`]: makes a fault-serving thread's engine state before its first fault.
//! - [`procfs`]: file work of uswap's own threads, in a descriptor table of their own.
//!
//! The module `internals` (hidden from this documentation) re-exports the parts that the
//! workspace's tests and benchmarks drive directly; it is not API.
//!
//! ## Parts
//!
//! The crate-private parts are named after the Linux `mm/` concepts they implement:
//!
//! - `swap_table`: the 8-byte word per slot that says everything about it (free, cached,
//!   zero, stored in which tier under which handle, swap count, group).
//! - `cluster`: the cluster allocator over a swap space (free / nonfull / frag / full /
//!   discard lists, per-order allocation of naturally aligned ranges, per-shard current
//!   cluster), and the per-cluster tables themselves.
//! - `swap_cache`: the resident copies of slots being swapped in or out; the single
//!   synchronization point for swap-in (add-or-get).
//! - [`vswap`]: the virtual swap layer over them, the [`Engine`].
//! - [`backend`] and [`tier`]: where data lives (zero elision, compressed pool, swap file).
//! - `group`: groups with limits and counters (the memory cgroup analogue).
//! - [`fails`]: store failures by tier and kind (full, read-only, I/O), which the engine
//!   passes over for the next tier.
//! - [`stats`]: kernel-named counters, sharded so the hot path stays cheap.
//! - `sync`: the one place that names atomics, locks (each with its lock class) and epoch
//!   reclamation, so that the loom build (`--cfg loom`) can swap them.
//! - `page_heap`: page-granular memory that goes back to the kernel when freed, at the bottom
//!   of the engine (the swap table, the cluster lists, the swap cache and the pool use it).
//!
//! `docs/design.md` in the repository is the contract between these parts (bit layout of the
//! table word, lock order, engine API).
//!
//! Locking: the root takes no lock of its own; each part states its locks, and
//! `docs/design.md` their order.

#![warn(unreachable_pub)]

pub mod backend;
mod cluster;
pub mod config;
mod error;
pub mod fails;
mod group;
mod page_heap;
pub mod procfs;
pub mod size;
pub mod stats;
mod swap_cache;
mod swap_table;
mod sync;
pub mod tier;
pub mod vswap;

pub use backend::{Backend, ShareStep, TierKind};
pub use cluster::FragPolicy;
pub use config::{TierSpec, TiersConfig};
pub use error::{SwapError, TierError};
pub use fails::{FailCounts, FailKind};
pub use group::GroupUsage;
pub use stats::{Event, Stats, StatsSnapshot};
pub use swap_table::{SwapEntry, MAX_ORDER, PAGE_SIZE, SLOTS_PER_CLUSTER};
pub use sync::FaultScope;
pub use vswap::{Engine, EngineConfig, Location, PageIn, SWAP_IN_BATCH};

#[doc(hidden)]
pub mod internals {
    //! Engine internals re-exported for the workspace's tests and benchmarks only (the
    //! cluster allocator, the swap table word, the swap cache, the groups, the lock
    //! accounting, the tiers' building blocks). Not part of the API: a program uses the
    //! facade of the crate root.
    //!
    //! Locking: none (re-exports only).

    /// The cluster allocator (`crate::cluster`).
    pub mod cluster {
        pub use crate::cluster::{AllocStats, BucketStats, ClusterHolds, FragPolicy, SpaceConfig, SwapSpace};
    }
    /// The swap table word and its limits (`crate::swap_table`).
    pub mod swap_table {
        pub use crate::swap_table::{
            Kind, SwapEntry, Word, COUNT_MAX, MAX_ORDER, NR_ORDERS, PAGE_SIZE, SLOTS_PER_CLUSTER,
        };
    }
    /// The swap cache (`crate::swap_cache`).
    pub mod swap_cache {
        pub use crate::swap_cache::{AddMode, Lookup, RefBit, SwapCache};
    }
    /// The groups' limits and counters (`crate::group`).
    pub mod group {
        pub use crate::group::{GroupUsage, Groups};
    }
    /// The engine's mutex and the fault path's lock accounting (`crate::sync`).
    pub mod sync {
        pub use crate::sync::{
            fault_entries_holding_locks, fault_lock_counts, held_locks, in_fault_path, FaultScope, LockClass, Mutex,
        };
    }
    /// Encryption at rest of the file tier (`crate::tier::crypt`).
    pub mod crypt {
        pub use crate::tier::crypt::{PageCipher, META_BYTES};
    }
    /// The file tier's drop-behind window (`crate::tier::drop_behind`).
    pub mod drop_behind {
        pub use crate::tier::drop_behind::WINDOW_BYTES;
    }
    /// The file tier's I/O engines (`crate::tier::io_engine`).
    pub mod io_engine {
        pub use crate::tier::io_engine::{Fault, FaultEngine, IoBuf, IoEngine, IoOp, PsyncEngine, UringEngine};
    }
    /// The LZ4 codec over page tables (`crate::tier::lz4`).
    pub mod lz4 {
        pub use crate::tier::lz4::{decompress_exact, Lz4Table};
    }
    /// The swap file's header (`crate::tier::swapfile`).
    pub mod swapfile {
        pub use crate::tier::swapfile::{HEADER_BYTES, MAGIC};
    }
    /// Zero-page detection (`crate::tier::zero`).
    pub mod zero {
        pub use crate::tier::zero::{is_zero, is_zero_naive};
    }
}

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
