//! Cluster allocator and per-cluster swap tables (the kernel's `mm/swapfile.c` allocator and
//! cluster lists, and the `mm/swap_table.h` table lifetime).
//!
//! A [`SwapSpace`] is an array of 512-slot clusters. It owns, per cluster, the table of slot
//! words (allocated when the cluster gets its first used slot, retired through
//! `crossbeam-epoch` when its last slot is freed), the count extension table, a bitmap of
//! used slots, and the cluster's place on the allocator lists: `free`, `nonfull[order]`,
//! `frag[order]` (split in buckets under [`FragPolicy::Buckets`]), `full` and `discard`.
//! A cluster's flag always names the list it is on (`NONE` only while an allocator has it
//! isolated and locked). Each allocator shard (the stand-in for a CPU) remembers the next
//! offset per order in its current cluster, as the kernel's `percpu_swap_cluster`.
//!
//! This file holds the space ([`SwapSpace`]: its configuration, clusters, lists and shards,
//! which own its locks) and its sizes. The rest is a file per concept, from the bottom up:
//! - `lock` (the cluster lock), `list` (intrusive index lists), `frag` (the fragment policy's
//!   buckets and success model), `state` (one cluster's state, the list ids, the bitmap),
//!   `array` (the cluster descriptors, made ready in order);
//! - `table` (a cluster's table: lock-free read, allocation, retirement through the epoch),
//!   `relocate` (a cluster's place on the lists, and discards), `share` (clusters held by other
//!   processes since a `fork`);
//! - `alloc` (the allocator), `guard` ([`ClusterGuard`]: changes of words and counts, frees);
//! - `stats` (allocator statistics), `check` (the invariants, for tests).
//!
//! # Locking
//! Locking: the code of this file takes only the list lock: to make a never-used cluster
//! ready (`SwapSpace::cluster`; `make_ready` and `ready_next_fresh` run with it held) and to
//! read the size of the list links ([`SwapSpace::metadata_bytes`]). The rules every file of
//! the space follows (each file's "Locking:" says which locks its code takes):
//! - Words are read lock-free ([`SwapSpace::load`]: epoch pin, table pointer, word).
//! - Everything else about a cluster (words, count, bitmap, extend table, flag, order, table
//!   pointer) changes only under its lock, `Cluster::state`.
//! - Lock order: shard lock -> cluster lock -> list lock (`SwapSpace::lists`). While holding
//!   the list lock a cluster lock is only *tried* (`isolate_lock`, the kernel's
//!   `isolate_lock_cluster`); a flag changes only with both the cluster and the list lock held.
//! - A [`ClusterGuard`] is the cluster lock: what its holder must not do is in `guard.rs`.

mod alloc;
mod array;
mod check;
mod frag;
mod guard;
mod list;
mod lock;
mod relocate;
mod share;
mod state;
mod stats;
mod table;

#[cfg(all(test, not(loom)))]
mod tests;

use frag::{success_probability, NR_BUCKETS};
pub(crate) use guard::ClusterGuard;
pub use share::ClusterHolds;
pub use stats::{AllocStats, BucketStats};

use crate::swap_table::{SwapEntry, SwapTable};
use crate::sync::{lock, AtomicUsize, LockClass, Mutex, Ordering};
use crate::SwapError;
use alloc::Shard;
use array::ClusterArray;
use crossbeam_utils::CachePadded;
use list::Lists;
use state::{Cluster, L_FREE, N, NR_LISTS};

/// How fragment clusters are searched.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default, serde::Serialize)]
pub enum FragPolicy {
    /// The kernel's (v6.18) policy: try one cluster from `frag[order]` per allocation.
    #[default]
    ScanOne,
    /// Chris Li's proposal: frag clusters bucketed by how free they are, freer buckets first,
    /// each bucket with its own search cut-off from the success model (see `frag.rs`).
    Buckets,
}

/// Configuration of a swap space.
#[derive(Clone, Debug)]
pub struct SpaceConfig {
    /// Number of slots, rounded up to whole clusters ([`SwapSpace::nr_slots`] is the result).
    pub nr_slots: u64,
    /// Fragment policy.
    pub frag_policy: FragPolicy,
    /// Whether emptied clusters go through the discard list before reuse
    /// ([`SwapSpace::process_discards`] moves them to the free list).
    pub discard: bool,
    /// Number of allocator shards ("CPUs"), each with its own current cluster per order.
    pub nr_shards: usize,
}

impl Default for SpaceConfig {
    fn default() -> Self {
        SpaceConfig { nr_slots: 1 << 20, frag_policy: FragPolicy::ScanOne, discard: false, nr_shards: 8 }
    }
}

/// A swap space: clusters, their tables and the allocator lists.
pub struct SwapSpace {
    cfg: SpaceConfig,
    nr_slots: u64,
    /// The clusters; those never used are not even initialized ([`ClusterArray`]).
    clusters: ClusterArray,
    lists: Mutex<Lists>,
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    used_slots: AtomicUsize,
    live_tables: AtomicUsize,
    live_extend: AtomicUsize,
    /// Holds on clusters of a space shared with other processes (`share.rs`); `None` for a
    /// space this process has to itself.
    holds: Option<std::sync::Arc<dyn ClusterHolds>>,
    /// Under loom, retired tables are kept here until the space drops.
    #[cfg(loom)]
    retired: Mutex<Vec<usize>>,
}

impl SwapSpace {
    /// Create a space of `cfg.nr_slots` slots (rounded up to whole clusters), all free.
    pub fn new(cfg: SpaceConfig) -> Result<Self, SwapError> {
        if cfg.nr_slots == 0 {
            return Err(SwapError::Config("a swap space needs at least one slot".into()));
        }
        let nr_clusters = cfg.nr_slots.div_ceil(N as u64);
        if nr_clusters >= u64::from(u32::MAX) || nr_clusters.saturating_mul(N as u64) > 1 << 41 {
            return Err(SwapError::Config(format!("{} slots is too many for one space", cfg.nr_slots)));
        }
        if cfg.nr_shards == 0 || cfg.nr_shards > 1024 {
            return Err(SwapError::Config(format!("nr_shards must be 1..=1024, not {}", cfg.nr_shards)));
        }
        let nr_clusters = nr_clusters as usize;
        // Every cluster is free; none is ready yet (they are made ready in order, as the
        // allocator wants free ones: `isolate_lock_in`).
        let clusters = ClusterArray::new(nr_clusters);
        let lists = Lists::new(NR_LISTS, nr_clusters);
        let shards =
            (0..cfg.nr_shards).map(|_| CachePadded::new(Mutex::new(LockClass::SpaceShard, Shard::new()))).collect();
        if cfg.frag_policy == FragPolicy::Buckets {
            // Build the model table now rather than inside the first allocation.
            let _ = success_probability(1, 0);
        }
        Ok(SwapSpace {
            nr_slots: (nr_clusters * N) as u64,
            cfg,
            clusters,
            lists: Mutex::new(LockClass::SpaceLists, lists),
            shards,
            used_slots: AtomicUsize::new(0),
            live_tables: AtomicUsize::new(0),
            live_extend: AtomicUsize::new(0),
            holds: None,
            #[cfg(loom)]
            retired: Mutex::new(LockClass::SpaceRetired, Vec::new()),
        })
    }

    /// Number of slots (a multiple of the cluster size).
    pub fn nr_slots(&self) -> u64 {
        self.nr_slots
    }

    /// Number of clusters.
    pub fn nr_clusters(&self) -> usize {
        self.clusters.len()
    }

    /// Slots in use.
    pub fn used_slots(&self) -> usize {
        self.used_slots.load(Ordering::Relaxed)
    }

    /// Bytes of allocator and table metadata, from the real allocations: the ready part of
    /// the cluster array and of the list links (the rest is never written), the shards, live
    /// tables and live extend tables.
    pub fn metadata_bytes(&self) -> usize {
        let ready = self.clusters.ready();
        std::mem::size_of::<Self>()
            + ready * std::mem::size_of::<Cluster>()
            + lock(&self.lists).bytes(ready)
            + std::mem::size_of_val(&*self.shards)
            + self.live_tables.load(Ordering::Relaxed) * std::mem::size_of::<SwapTable>()
            + self.live_extend.load(Ordering::Relaxed) * std::mem::size_of::<[u32; N]>()
    }

    /// Number of live per-cluster tables.
    pub fn live_tables(&self) -> usize {
        self.live_tables.load(Ordering::Relaxed)
    }

    /// Number of live extend tables.
    pub fn live_extend_tables(&self) -> usize {
        self.live_extend.load(Ordering::Relaxed)
    }

    /// `Ok` if `e` names a slot of the space.
    fn check_entry(&self, e: SwapEntry) -> Result<(), SwapError> {
        if e.0 < self.nr_slots {
            Ok(())
        } else {
            Err(SwapError::OutOfRange(e.0))
        }
    }

    /// Cluster `ci` (below [`SwapSpace::nr_clusters`]), made ready first if it never was (only
    /// an entry no allocation returned names such a cluster). Takes the list lock in that
    /// case: not to be called with it held.
    #[inline]
    fn cluster(&self, ci: usize) -> &Cluster {
        if let Some(c) = self.clusters.get(ci) {
            return c;
        }
        let mut l = lock(&self.lists);
        self.make_ready(&mut l, ci + 1);
        drop(l);
        self.clusters.get(ci).expect("made ready above")
    }

    /// Make the next never-used cluster ready (free, at the tail of the free list) and return
    /// it; None when every cluster is ready. List lock held (`l`).
    fn ready_next_fresh(&self, l: &mut Lists) -> Option<usize> {
        let fresh = self.clusters.ready();
        (fresh < self.clusters.len()).then(|| {
            self.make_ready(l, fresh + 1);
            fresh
        })
    }

    /// Make the clusters up to `to` ready: free, at the tail of the free list. List lock held
    /// (`l`).
    fn make_ready(&self, l: &mut Lists, to: usize) {
        // SAFETY: `l` is this space's list lock, held by the caller.
        unsafe { self.clusters.make_ready(l, to, Cluster::new, |l, ci| l.move_tail(ci as u32, L_FREE)) };
    }

    /// Number of fragment buckets per order under the configured policy (1 under `ScanOne`).
    fn nr_buckets(&self) -> usize {
        match self.cfg.frag_policy {
            FragPolicy::ScanOne => 1,
            FragPolicy::Buckets => NR_BUCKETS,
        }
    }
}
