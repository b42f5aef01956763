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
//! # Locking
//! - Words are read lock-free ([`SwapSpace::load`]: epoch pin, table pointer, word).
//! - Everything else about a cluster (words, count, bitmap, extend table, flag, order, table
//!   pointer) changes only under its lock, `Cluster::state`.
//! - Lock order: shard lock -> cluster lock -> list lock (`SwapSpace::lists`). While holding
//!   the list lock a cluster lock is only *tried* (`isolate_lock`, the kernel's
//!   `isolate_lock_cluster`); a flag changes only with both the cluster and the list lock held.
//! - A [`ClusterGuard`] is the cluster lock; it relocates the cluster on the lists when it is
//!   dropped after slots were freed. It must not be held while calling [`SwapSpace::alloc`]
//!   from the same thread (alloc may try to lock that cluster), and a thread holds at most one
//!   guard of a space at a time (cluster locks have no order among themselves).

mod array;
mod frag;
mod list;
mod lock;
mod share;
mod stats;

pub(crate) use frag::{bucket_of, bucket_prior, bucket_range, success_probability, NR_BUCKETS};
pub use share::ClusterHolds;
pub use stats::{AllocStats, BucketStats};

use crate::swap_table::{SwapEntry, SwapTable, Word, COUNT_MAX, MAX_ORDER, NR_ORDERS, SLOTS_PER_CLUSTER};
use crate::sync::{lock, thread_shard, AtomicPtr, AtomicUsize, LockClass, Mutex, Ordering};
use crate::SwapError;
use array::ClusterArray;
use crossbeam_utils::CachePadded;
use frag::Estimate;
use list::{Lists, NIL};
use lock::{ClusterLock, ClusterLockGuard};
use stats::{ShardStats, Source};

const N: usize = SLOTS_PER_CLUSTER;
const INVALID: u64 = u64::MAX;

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

/// The state of a cluster, the list it is on (kernel `enum swap_cluster_flags`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[repr(u8)]
pub(crate) enum ClusterFlag {
    /// Off every list: isolated by an allocator that holds its lock.
    None,
    /// On the free list (no used slot, no table).
    Free,
    /// On `nonfull[order]`.
    Nonfull,
    /// On `frag[order]` (bucket by used count under `Buckets`).
    Frag,
    /// On the full list.
    Full,
    /// On the shared list: used, and held by another process too since a `fork`, so no slot
    /// of it is allocated until this process holds it alone again (`share.rs`).
    Shared,
    /// On the foreign list: free here, but held by another process sharing the file.
    Foreign,
    /// On the discard list or being discarded.
    Discard,
}

/// Per-cluster state, under the cluster lock.
struct ClusterState {
    /// Used slots (kernel `ci->count`).
    count: u16,
    /// Order the cluster serves (kernel `ci->order`), 0 when free.
    order: u8,
    /// The list the cluster is on.
    flag: ClusterFlag,
    /// Frag bucket while `flag == Frag` (always 0 under `ScanOne`).
    bucket: u8,
    /// Slots whose inline count is saturated (their count is in `extend`).
    extend_used: u16,
    /// One bit per used slot: window searches without touching the table.
    used: [u64; N / 64],
    /// Full counts of saturated slots, allocated on first overflow.
    extend: Option<Box<[u32; N]>>,
}

struct Cluster {
    state: ClusterLock<ClusterState>,
    /// The table, null while the cluster has no used slot. Written under `state`.
    table: AtomicPtr<SwapTable>,
}

impl Cluster {
    /// A free cluster with no table.
    fn new() -> Self {
        Cluster {
            state: ClusterLock::new(ClusterState {
                count: 0,
                order: 0,
                flag: ClusterFlag::Free,
                bucket: 0,
                extend_used: 0,
                used: [0; N / 64],
                extend: None,
            }),
            table: AtomicPtr::new(std::ptr::null_mut()),
        }
    }
}

/// One allocator shard (the kernel's per-CPU `percpu_swap_cluster` plus counters).
struct Shard {
    /// Next slot to try per order in the current cluster, or `INVALID`.
    next: [u64; NR_ORDERS],
    stats: ShardStats,
    est: [[Estimate; NR_BUCKETS]; NR_ORDERS],
}

// List ids.
const L_FREE: u16 = 0;
const L_FULL: u16 = 1;
const L_DISCARD: u16 = 2;
const L_SHARED: u16 = 3;
const L_FOREIGN: u16 = 4;
const L_NONFULL0: u16 = 5;
const L_FRAG0: u16 = L_NONFULL0 + NR_ORDERS as u16;
const NR_LISTS: usize = L_FRAG0 as usize + NR_ORDERS * NR_BUCKETS;
/// Tag of a cluster taken off the discard list by `process_discards`.
const T_DISCARDING: u16 = NR_LISTS as u16;

#[inline]
fn l_nonfull(order: u8) -> u16 {
    L_NONFULL0 + order as u16
}
#[inline]
fn l_frag(order: u8, bucket: u8) -> u16 {
    L_FRAG0 + (order as usize * NR_BUCKETS + bucket as usize) as u16
}

#[inline]
fn bit(used: &[u64; N / 64], off: usize) -> bool {
    used[off / 64] >> (off % 64) & 1 != 0
}

/// True when the `n` slots from `off` are all free. `n` is a power of two and `off` is
/// aligned to it, so a window never straddles two bitmap words unless it covers whole words.
#[inline]
fn window_free(used: &[u64; N / 64], off: usize, n: usize) -> bool {
    if n >= 64 {
        used[off / 64..(off + n) / 64].iter().all(|&w| w == 0)
    } else {
        let mask = ((1u64 << n) - 1) << (off % 64);
        used[off / 64] & mask == 0
    }
}

fn set_bits(used: &mut [u64; N / 64], off: usize, n: usize, on: bool) {
    for i in off..off + n {
        if on {
            used[i / 64] |= 1 << (i % 64);
        } else {
            used[i / 64] &= !(1 << (i % 64));
        }
    }
}

/// `cluster_is_usable()`: on an allocatable list (or isolated), and free or serving `order`
/// (order 0 may use any usable cluster).
#[inline]
fn usable(st: &ClusterState, order: u8) -> bool {
    st.flag <= ClusterFlag::Frag && (order == 0 || st.count == 0 || st.order == order)
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
        let shards = (0..cfg.nr_shards)
            .map(|_| {
                CachePadded::new(Mutex::new(
                    LockClass::SpaceShard,
                    Shard {
                        next: [INVALID; NR_ORDERS],
                        stats: ShardStats::default(),
                        est: [[Estimate::default(); NR_BUCKETS]; NR_ORDERS],
                    },
                ))
            })
            .collect();
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

    fn check_entry(&self, e: SwapEntry) -> Result<(), SwapError> {
        if e.0 < self.nr_slots {
            Ok(())
        } else {
            Err(SwapError::OutOfRange(e.0))
        }
    }

    /// Lock-free read of a slot's word (`swap_table_get`): FREE when the cluster has no table.
    pub fn load(&self, e: SwapEntry) -> Result<Word, SwapError> {
        self.check_entry(e)?;
        let Some(c) = self.clusters.get(e.cluster()) else {
            return Ok(Word::FREE); // a cluster never used
        };
        #[cfg(not(loom))]
        let _pin = crossbeam_epoch::pin();
        let p = c.table.load(Ordering::Acquire);
        if p.is_null() {
            return Ok(Word::FREE);
        }
        // SAFETY: `p` was published by `ensure_table` with Release and is only freed through
        // the epoch after being unpublished; we are pinned, so it stays valid until `_pin`
        // drops (under loom retired tables live until the space drops).
        let t = unsafe { &*p };
        Ok(Word(t.words[e.offset()].load(Ordering::Acquire)))
    }

    /// Lock the cluster holding `e`.
    pub fn lock_cluster(&self, e: SwapEntry) -> Result<ClusterGuard<'_>, SwapError> {
        self.check_entry(e)?;
        let idx = e.cluster();
        Ok(ClusterGuard { space: self, idx, st: self.cluster(idx).state.lock(), dirty: false })
    }

    /// The first cluster at or after `from` that has used slots (a live table), for scanners
    /// (writeback, drain, compaction). Lock-free; the answer may be stale by the time the
    /// caller locks the cluster.
    pub fn next_used_cluster(&self, from: usize) -> Option<usize> {
        (from..self.clusters.ready())
            .find(|&i| self.clusters.get(i).is_some_and(|c| !c.table.load(Ordering::Acquire).is_null()))
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

    /// Lock cluster `idx` by index (for scanners using [`SwapSpace::next_used_cluster`]).
    pub fn lock_cluster_index(&self, idx: usize) -> Result<ClusterGuard<'_>, SwapError> {
        if idx >= self.clusters.len() {
            return Err(SwapError::OutOfRange((idx as u64).saturating_mul(N as u64)));
        }
        Ok(ClusterGuard { space: self, idx, st: self.cluster(idx).state.lock(), dirty: false })
    }

    // ---- allocation -------------------------------------------------------------------

    /// Allocate `2^order` naturally aligned free slots in one cluster and write `init(i)`
    /// (non-free, inline count below 15) into slot `i`, all under the cluster lock.
    ///
    /// Fails with `NoSpace { order }` when no such range is found (the caller splits). An
    /// order-0 allocation only fails when no slot is free: if every cluster with a free slot
    /// was locked when tried, it waits for one (it can still fail when the only free slots are
    /// in clusters other allocators hold isolated at that instant). With `discard` on,
    /// clusters waiting on the discard list are not free yet.
    pub fn alloc(&self, order: u8, init: &mut dyn FnMut(usize) -> Word) -> Result<SwapEntry, SwapError> {
        if order > MAX_ORDER {
            return Err(SwapError::NoSpace { order });
        }
        let mut shard = lock(&self.shards[thread_shard() % self.shards.len()]);
        let r = self.alloc_locked(&mut shard, order, init);
        match r {
            Ok(_) => shard.stats.alloc[order as usize] += 1,
            Err(SwapError::NoSpace { .. }) => shard.stats.fail[order as usize] += 1,
            Err(_) => {}
        }
        r
    }

    fn alloc_locked(
        &self,
        sh: &mut Shard,
        order: u8,
        init: &mut dyn FnMut(usize) -> Word,
    ) -> Result<SwapEntry, SwapError> {
        let o = order as usize;
        // Fast path: the shard's current cluster for this order (`swap_alloc_fast`).
        let next = sh.next[o];
        if next != INVALID {
            let ci = (next / N as u64) as usize;
            let mut st = self.cluster(ci).state.lock();
            if usable(&st, order) {
                let start = if st.count == 0 { 0 } else { (next % N as u64) as usize };
                if let Some(e) = self.scan(ci, &mut st, start, order, sh, init)? {
                    sh.stats.src[Source::Fast as usize][o] += 1;
                    return Ok(e);
                }
            } else {
                sh.next[o] = INVALID;
            }
        }
        // Slow path (`cluster_alloc_swap_entry`).
        if self.cfg.discard {
            if let Some(e) = self.alloc_from(L_FREE, order, sh, init)? {
                sh.stats.src[Source::Free as usize][o] += 1;
                return Ok(e);
            }
        }
        if order < MAX_ORDER {
            while let Some((ci, mut st)) = self.isolate_lock(l_nonfull(order)) {
                if let Some(e) = self.scan(ci, &mut st, 0, order, sh, init)? {
                    sh.stats.src[Source::Nonfull as usize][o] += 1;
                    return Ok(e);
                }
            }
        }
        if !self.cfg.discard {
            if let Some(e) = self.alloc_from(L_FREE, order, sh, init)? {
                sh.stats.src[Source::Free as usize][o] += 1;
                return Ok(e);
            }
        }
        if order < MAX_ORDER {
            if let Some(e) = self.alloc_frag(order, sh, init)? {
                sh.stats.src[Source::Frag as usize][o] += 1;
                return Ok(e);
            }
        }
        if order == 0 {
            // Order 0 steals from any usable cluster: for each order, its frag lists, then its
            // nonfull list. Any cluster on these lists has a free slot. Buckets are taken
            // fullest first, leaving the freest clusters to the orders they serve.
            let nb = self.nr_buckets() as u8;
            let steal_lists = || {
                (0..NR_ORDERS as u8)
                    .flat_map(move |o| (0..nb).rev().map(move |b| l_frag(o, b)).chain((o > 0).then(|| l_nonfull(o))))
            };
            while let Some((ci, mut st)) = self.isolate_lock_in(steal_lists()) {
                if let Some(e) = self.scan(ci, &mut st, 0, 0, sh, init)? {
                    sh.stats.src[Source::Steal as usize][0] += 1;
                    return Ok(e);
                }
            }
            // Every cluster with a free slot was locked by someone else when we tried it: wait
            // for one (blocking, outside the list lock) rather than fail.
            if let Some(e) = self.alloc_order0_wait(sh, init)? {
                sh.stats.src[Source::Steal as usize][0] += 1;
                return Ok(e);
            }
        }
        Err(SwapError::NoSpace { order })
    }

    /// Last resort of order 0: pick a cluster with a free slot from the lists, drop the list
    /// lock, wait for its lock (lock order cluster -> list), and use it if it is still on an
    /// allocatable list. A few rounds, since the pick may be stale by the time we hold it.
    fn alloc_order0_wait(
        &self,
        sh: &mut Shard,
        init: &mut dyn FnMut(usize) -> Word,
    ) -> Result<Option<SwapEntry>, SwapError> {
        for _ in 0..8 {
            let cand = {
                let mut l = lock(&self.lists);
                // The free list holds no never-used cluster: make the next one ready there
                // (the one `isolate_lock_in` would have taken, if another process's hold
                // turned it away, is on the foreign list now).
                if l.first(L_FREE) == NIL {
                    self.ready_next_fresh(&mut l);
                }
                let mut ids = std::iter::once(L_FREE)
                    .chain((0..NR_ORDERS as u8).map(l_nonfull))
                    .chain((0..NR_ORDERS as u8).flat_map(|o| (0..NR_BUCKETS as u8).map(move |b| l_frag(o, b))));
                ids.find_map(|id| {
                    let c = l.first(id);
                    (c != NIL).then_some(c as usize)
                })
            };
            let Some(ci) = cand else {
                return Ok(None);
            };
            let mut st = self.cluster(ci).state.lock();
            if st.flag == ClusterFlag::None || st.flag > ClusterFlag::Frag || st.count as usize >= N {
                continue;
            }
            lock(&self.lists).remove(ci as u32);
            st.flag = ClusterFlag::None;
            if let Some(e) = self.scan(ci, &mut st, 0, 0, sh, init)? {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    fn nr_buckets(&self) -> usize {
        match self.cfg.frag_policy {
            FragPolicy::ScanOne => 1,
            FragPolicy::Buckets => NR_BUCKETS,
        }
    }

    /// One cluster from `list`, scanned from its start. A free cluster another process
    /// claimed first (a space shared since a `fork`, where every relative's free list starts
    /// with the same clusters) goes to the `foreign` list and the next one is tried, so a
    /// sibling's claim never makes an allocation fail while a free cluster is left.
    fn alloc_from(
        &self,
        list: u16,
        order: u8,
        sh: &mut Shard,
        init: &mut dyn FnMut(usize) -> Word,
    ) -> Result<Option<SwapEntry>, SwapError> {
        while let Some((ci, mut st)) = self.isolate_lock(list) {
            let claimed_elsewhere = st.count == 0 && self.holds.is_some();
            match self.scan(ci, &mut st, 0, order, sh, init)? {
                None if claimed_elsewhere && st.flag == ClusterFlag::Foreign => continue,
                r => return Ok(r),
            }
        }
        Ok(None)
    }

    /// The fragment step under the configured policy.
    fn alloc_frag(
        &self,
        order: u8,
        sh: &mut Shard,
        init: &mut dyn FnMut(usize) -> Word,
    ) -> Result<Option<SwapEntry>, SwapError> {
        let o = order as usize;
        match self.cfg.frag_policy {
            FragPolicy::ScanOne => {
                let Some((ci, mut st)) = self.isolate_lock(l_frag(order, 0)) else {
                    return Ok(None);
                };
                sh.stats.frag_scans[o] += 1;
                sh.stats.bucket_scans[o][0] += 1;
                let r = self.scan(ci, &mut st, 0, order, sh, init)?;
                if r.is_some() {
                    sh.stats.bucket_hits[o][0] += 1;
                }
                Ok(r)
            }
            FragPolicy::Buckets => {
                let lens: [usize; NR_BUCKETS] = {
                    let l = lock(&self.lists);
                    std::array::from_fn(|b| l.len(l_frag(order, b as u8)))
                };
                for b in 0..NR_BUCKETS as u8 {
                    let list = l_frag(order, b);
                    let len = lens[b as usize];
                    if len == 0 {
                        continue;
                    }
                    // A bucket whose clusters cannot have 2^order free slots is never tried.
                    if N - (bucket_range(b).0 as usize) < 1 << order {
                        continue;
                    }
                    let budget = sh.est[o][b as usize].budget(bucket_prior(order, b));
                    for _ in 0..(budget as usize).min(len) {
                        let Some((ci, mut st)) = self.isolate_lock(list) else {
                            break;
                        };
                        sh.stats.frag_scans[o] += 1;
                        sh.stats.bucket_scans[o][b as usize] += 1;
                        let r = self.scan(ci, &mut st, 0, order, sh, init)?;
                        sh.est[o][b as usize].record(r.is_some());
                        if r.is_some() {
                            sh.stats.bucket_hits[o][b as usize] += 1;
                            return Ok(r);
                        }
                    }
                }
                Ok(None)
            }
        }
    }

    /// `isolate_lock_cluster`: take the first cluster of `list` whose lock can be taken
    /// without waiting, off the list (flag NONE), locked.
    fn isolate_lock(&self, list: u16) -> Option<(usize, ClusterLockGuard<'_, ClusterState>)> {
        self.isolate_lock_in(std::iter::once(list))
    }

    /// [`Self::isolate_lock`] over several lists in turn, under one hold of the list lock.
    fn isolate_lock_in(&self, lists: impl Iterator<Item = u16>) -> Option<(usize, ClusterLockGuard<'_, ClusterState>)> {
        let mut l = lock(&self.lists);
        for list in lists {
            // Never-used clusters first, in order (the order of a free list on which every
            // cluster started, with the freed ones behind).
            let fresh = if list == L_FREE { self.ready_next_fresh(&mut l) } else { None };
            if let Some(fresh) = fresh {
                let c = self.clusters.get(fresh).expect("made ready");
                if let Some(mut st) = c.state.try_lock() {
                    l.remove(fresh as u32);
                    st.flag = ClusterFlag::None;
                    return Some((fresh, st));
                }
            }
            let mut c = l.first(list);
            while c != NIL {
                // A cluster on a list is ready (`get`, not `cluster`: the list lock is held).
                let cl = self.clusters.get(c as usize).expect("a cluster on a list is ready");
                if let Some(mut st) = cl.state.try_lock() {
                    debug_assert!(st.flag != ClusterFlag::None);
                    l.remove(c);
                    st.flag = ClusterFlag::None;
                    return Some((c as usize, st));
                }
                c = l.next_of(c);
            }
        }
        None
    }

    /// `alloc_swap_scan_cluster`: with cluster `ci` locked, find the first free aligned
    /// window of `2^order` slots at or after `start`, fill it, update the shard's next offset
    /// and relocate the cluster. `Err` only for a bad `init` word (nothing allocated).
    fn scan(
        &self,
        ci: usize,
        st: &mut ClusterState,
        start: usize,
        order: u8,
        sh: &mut Shard,
        init: &mut dyn FnMut(usize) -> Word,
    ) -> Result<Option<SwapEntry>, SwapError> {
        if st.count == 0 && !self.claim(ci, st) {
            sh.next[order as usize] = INVALID;
            return Ok(None);
        }
        let n = 1usize << order;
        let mut off = start.next_multiple_of(n);
        let mut found = None;
        if st.count as usize + n <= N {
            while off + n <= N {
                if window_free(&st.used, off, n) {
                    found = Some(off);
                    break;
                }
                off += n;
            }
        }
        let res = match found {
            None => {
                sh.next[order as usize] = INVALID;
                Ok(None)
            }
            Some(off) => {
                let first = SwapEntry((ci * N + off) as u64);
                match self.fill(ci, st, off, order, init) {
                    Ok(()) => {
                        let nx = off + n;
                        sh.next[order as usize] =
                            if nx < N && (st.count as usize) < N { (ci * N + nx) as u64 } else { INVALID };
                        Ok(Some(first))
                    }
                    Err(()) => Err(SwapError::BadFolio { entry: first.0, order }),
                }
            }
        };
        self.relocate_after_alloc(ci, st);
        res
    }

    /// Write the window's words (`__swap_cluster_alloc_entries`); on a bad word, undo.
    fn fill(
        &self,
        ci: usize,
        st: &mut ClusterState,
        off: usize,
        order: u8,
        init: &mut dyn FnMut(usize) -> Word,
    ) -> Result<(), ()> {
        let n = 1usize << order;
        let t = self.ensure_table(ci);
        for i in 0..n {
            let w = init(i);
            if w.is_free() || w.count() == COUNT_MAX {
                for j in 0..i {
                    t.words[off + j].store(0, Ordering::Release);
                }
                if st.count == 0 {
                    self.retire_table(ci);
                }
                return Err(());
            }
            t.words[off + i].store(w.0, Ordering::Release);
        }
        if st.count == 0 {
            st.order = order;
        }
        set_bits(&mut st.used, off, n, true);
        st.count += n as u16;
        self.used_slots.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// The cluster's table, allocating it if the cluster has none. Cluster lock held.
    fn ensure_table(&self, ci: usize) -> &SwapTable {
        let c = self.cluster(ci);
        let mut p = c.table.load(Ordering::Relaxed);
        if p.is_null() {
            p = SwapTable::alloc_raw();
            c.table.store(p, Ordering::Release);
            self.live_tables.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: non-null, from SwapTable::alloc_raw; freed only after `retire_table` unpublishes it
        // under the cluster lock, which the caller holds for as long as it uses the reference.
        unsafe { &*p }
    }

    /// Unpublish the cluster's table and free it once no lock-free reader can hold it
    /// (`swap_cluster_free_table`, with the epoch in place of RCU). Cluster lock held; every
    /// word of the table is FREE.
    fn retire_table(&self, ci: usize) {
        let p = self.cluster(ci).table.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if p.is_null() {
            return;
        }
        self.live_tables.fetch_sub(1, Ordering::Relaxed);
        #[cfg(not(loom))]
        {
            let addr = p as usize;
            let guard = crossbeam_epoch::pin();
            // SAFETY: the table is unreachable for new readers (swapped out above) and was
            // allocated by SwapTable::alloc_raw; readers pinned before the swap finish before
            // the epoch advances past this deferral, after which nobody can touch it.
            unsafe {
                guard.defer_unchecked(move || SwapTable::free_raw(addr as *mut SwapTable));
            }
        }
        #[cfg(loom)]
        lock(&self.retired).push(p as usize);
    }

    // ---- relocation (cluster lock held, list lock taken inside) ---------------------------

    fn move_cluster(&self, ci: usize, st: &mut ClusterState, flag: ClusterFlag, list: u16) {
        lock(&self.lists).move_tail(ci as u32, list);
        st.flag = flag;
    }

    /// `free_cluster`: an empty cluster goes to the discard list or the free list. In a shared
    /// space only the last holder discards (its hold is released once the hole is punched);
    /// any other releases its hold now.
    fn free_cluster(&self, ci: usize, st: &mut ClusterState) {
        debug_assert_eq!(st.count, 0);
        st.order = 0;
        st.bucket = 0;
        if let Some(h) = &self.holds {
            if !(self.cfg.discard && h.sole(ci)) {
                h.release(ci);
                self.move_cluster(ci, st, ClusterFlag::Free, L_FREE);
                return;
            }
        }
        if self.cfg.discard {
            self.move_cluster(ci, st, ClusterFlag::Discard, L_DISCARD);
        } else {
            self.move_cluster(ci, st, ClusterFlag::Free, L_FREE);
        }
    }

    /// `relocate_cluster`, after an allocation attempt: empty -> free, partial -> frag
    /// (its bucket), full -> full.
    fn relocate_after_alloc(&self, ci: usize, st: &mut ClusterState) {
        if st.flag == ClusterFlag::Discard {
            return;
        }
        let count = st.count as usize;
        if count == 0 {
            if st.flag != ClusterFlag::Free {
                self.free_cluster(ci, st);
            }
        } else if count < N {
            let b = if self.cfg.frag_policy == FragPolicy::Buckets { bucket_of(st.count) } else { 0 };
            if st.flag != ClusterFlag::Frag || st.bucket != b {
                st.bucket = b;
                self.move_cluster(ci, st, ClusterFlag::Frag, l_frag(st.order, b));
            }
        } else if st.flag != ClusterFlag::Full {
            self.move_cluster(ci, st, ClusterFlag::Full, L_FULL);
        }
    }

    /// After slots were freed (`partial_free_cluster` / `free_cluster`).
    fn relocate_after_free(&self, ci: usize, st: &mut ClusterState) {
        if st.count == 0 {
            if st.flag != ClusterFlag::Free && st.flag != ClusterFlag::Discard {
                self.free_cluster(ci, st);
            }
        } else if st.flag != ClusterFlag::Nonfull && st.flag != ClusterFlag::Shared {
            st.bucket = 0;
            self.move_cluster(ci, st, ClusterFlag::Nonfull, l_nonfull(st.order));
        }
    }

    /// Discard worker (`swap_do_scheduled_discard`): take each cluster off the discard list,
    /// call `discard(cluster_index)` with no lock held (the file tier punches a hole), then
    /// put it on the free list. Returns the number of clusters discarded.
    pub fn process_discards(&self, discard: &mut dyn FnMut(usize)) -> usize {
        let mut done = 0;
        loop {
            let ci = {
                let mut l = lock(&self.lists);
                let c = l.first(L_DISCARD);
                if c == NIL {
                    break;
                }
                l.tag(c, T_DISCARDING);
                c as usize
            };
            discard(ci);
            let mut st = self.cluster(ci).state.lock();
            debug_assert_eq!(st.flag, ClusterFlag::Discard);
            debug_assert_eq!(st.count, 0);
            if let Some(h) = &self.holds {
                h.release(ci);
            }
            self.move_cluster(ci, &mut st, ClusterFlag::Free, L_FREE);
            done += 1;
        }
        done
    }

    // ---- statistics and checking ----------------------------------------------------------

    /// A snapshot of the allocator statistics.
    pub fn alloc_stats(&self) -> AllocStats {
        let mut s = AllocStats { policy: self.cfg.frag_policy, ..AllocStats::default() };
        let mut scans = [[0u64; NR_BUCKETS]; NR_ORDERS];
        let mut hits = [[0u64; NR_BUCKETS]; NR_ORDERS];
        for sh in self.shards.iter() {
            let sh = lock(sh);
            sh.stats.add(&mut s);
            for o in 0..NR_ORDERS {
                for b in 0..NR_BUCKETS {
                    scans[o][b] += sh.stats.bucket_scans[o][b];
                    hits[o][b] += sh.stats.bucket_hits[o][b];
                }
            }
        }
        let l = lock(&self.lists);
        s.free_clusters = l.len(L_FREE) + (self.clusters.len() - self.clusters.ready());
        s.full_clusters = l.len(L_FULL);
        s.discard_clusters = l.len(L_DISCARD);
        s.shared_clusters = l.len(L_SHARED);
        s.foreign_clusters = l.len(L_FOREIGN);
        for o in 0..NR_ORDERS as u8 {
            s.nonfull_clusters[o as usize] = l.len(l_nonfull(o));
            s.frag_clusters[o as usize] = (0..NR_BUCKETS as u8).map(|b| l.len(l_frag(o, b))).sum();
        }
        for o in 0..MAX_ORDER {
            for b in 0..self.nr_buckets() as u8 {
                let (lo, hi, p) = match self.cfg.frag_policy {
                    FragPolicy::Buckets => {
                        let (lo, hi) = bucket_range(b);
                        (lo, hi.min(N as u16), Some(bucket_prior(o, b)))
                    }
                    FragPolicy::ScanOne => (0, N as u16, None),
                };
                s.buckets.push(BucketStats {
                    order: o,
                    bucket: b,
                    min_used: lo,
                    max_used: hi,
                    clusters: l.len(l_frag(o, b)),
                    scans: scans[o as usize][b as usize],
                    hits: hits[o as usize][b as usize],
                    p_model: p,
                });
            }
        }
        s
    }

    /// Check every invariant of the space against its state; for tests and debugging. Call
    /// only while no other thread uses the space. Returns a description of the first
    /// violation found.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut used_total = 0usize;
        let mut tables = 0usize;
        let mut extends = 0usize;
        for (ci, c) in self.clusters.iter().enumerate() {
            let st = c.state.lock();
            let l = lock(&self.lists);
            let on = l.on(ci as u32);
            drop(l);
            let count = st.count as usize;
            used_total += count;
            let pop: u32 = st.used.iter().map(|w| w.count_ones()).sum();
            if pop as usize != count {
                return Err(format!("cluster {ci}: count {count} but bitmap has {pop}"));
            }
            let p = c.table.load(Ordering::Acquire);
            if (count > 0) == p.is_null() {
                return Err(format!("cluster {ci}: count {count} but table present = {}", !p.is_null()));
            }
            if !p.is_null() {
                tables += 1;
                // SAFETY: we hold the cluster lock, so the table cannot be retired meanwhile.
                let t = unsafe { &*p };
                let mut sat = 0;
                for off in 0..N {
                    let w = Word(t.words[off].load(Ordering::Relaxed));
                    if w.is_free() == bit(&st.used, off) {
                        return Err(format!("cluster {ci} slot {off}: word {w:?} but used bit {}", bit(&st.used, off)));
                    }
                    if w.count() == COUNT_MAX {
                        sat += 1;
                        match &st.extend {
                            Some(x) if x[off] >= u32::from(COUNT_MAX) => {}
                            _ => return Err(format!("cluster {ci} slot {off}: saturated without extend count")),
                        }
                    } else if let Some(x) = &st.extend {
                        if x[off] != 0 {
                            return Err(format!("cluster {ci} slot {off}: stale extend count {}", x[off]));
                        }
                    }
                }
                if sat != st.extend_used {
                    return Err(format!("cluster {ci}: extend_used {} but {sat} saturated", st.extend_used));
                }
            }
            if st.extend.is_some() {
                extends += 1;
            }
            if st.extend.is_some() != (st.extend_used > 0) {
                return Err(format!(
                    "cluster {ci}: extend table {} with {} users",
                    st.extend.is_some(),
                    st.extend_used
                ));
            }
            let want: Option<u16> = match st.flag {
                ClusterFlag::None => return Err(format!("cluster {ci}: isolated (NONE) at rest")),
                ClusterFlag::Free if count == 0 && st.order == 0 => Some(L_FREE),
                ClusterFlag::Discard if count == 0 => {
                    if on == T_DISCARDING {
                        None
                    } else {
                        Some(L_DISCARD)
                    }
                }
                ClusterFlag::Nonfull if count > 0 && count < N => Some(l_nonfull(st.order)),
                ClusterFlag::Frag if count > 0 && count < N => {
                    let b = if self.cfg.frag_policy == FragPolicy::Buckets { bucket_of(st.count) } else { 0 };
                    if st.bucket != b {
                        return Err(format!("cluster {ci}: bucket {} but count {count} wants {b}", st.bucket));
                    }
                    Some(l_frag(st.order, b))
                }
                ClusterFlag::Full if count == N => Some(L_FULL),
                ClusterFlag::Shared if count > 0 => Some(L_SHARED),
                ClusterFlag::Foreign if count == 0 && st.order == 0 => Some(L_FOREIGN),
                f => return Err(format!("cluster {ci}: flag {f:?} with count {count} order {}", st.order)),
            };
            if let Some(want) = want {
                if on != want {
                    return Err(format!("cluster {ci}: flag {:?} (list {want}) but on list {on}", st.flag));
                }
            }
        }
        lock(&self.lists).check()?;
        if used_total != self.used_slots() {
            return Err(format!("used_slots {} but clusters hold {used_total}", self.used_slots()));
        }
        if tables != self.live_tables() || extends != self.live_extend_tables() {
            return Err(format!(
                "counted {tables} tables / {extends} extend tables, accounting says {} / {}",
                self.live_tables(),
                self.live_extend_tables()
            ));
        }
        Ok(())
    }
}

impl Drop for SwapSpace {
    fn drop(&mut self) {
        for c in self.clusters.iter() {
            let p = c.table.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() {
                // SAFETY: `&mut self`: no guard or reader borrows the space any more, and the
                // pointer came from SwapTable::alloc_raw and was never retired.
                unsafe { SwapTable::free_raw(p) };
            }
        }
        #[cfg(loom)]
        for addr in lock(&self.retired).drain(..) {
            // SAFETY: retired tables were unpublished and are freed exactly once, here.
            unsafe { SwapTable::free_raw(addr as *mut SwapTable) };
        }
    }
}

/// A locked cluster: every change of a word goes through one. Offsets are slot offsets
/// inside the cluster (`SwapEntry::offset`).
pub struct ClusterGuard<'a> {
    space: &'a SwapSpace,
    idx: usize,
    st: ClusterLockGuard<'a, ClusterState>,
    dirty: bool,
}

impl ClusterGuard<'_> {
    /// The entry of slot `off` of this cluster.
    pub(crate) fn entry(&self, off: usize) -> SwapEntry {
        SwapEntry((self.idx * N + off) as u64)
    }

    /// Used slots in the cluster.
    pub fn used(&self) -> usize {
        self.st.count as usize
    }

    fn table(&self) -> Option<&SwapTable> {
        let p = self.space.cluster(self.idx).table.load(Ordering::Relaxed);
        // SAFETY: the table only changes under the cluster lock, which this guard holds; it
        // is retired only by `free_range` (`&mut self`), so no shared borrow outlives it.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    fn in_use(&self, off: usize) -> Result<(), SwapError> {
        if off >= N {
            return Err(SwapError::OutOfRange((self.idx * N) as u64 + off as u64));
        }
        if !bit(&self.st.used, off) {
            return Err(SwapError::NotInUse(self.entry(off).0));
        }
        Ok(())
    }

    /// The word of slot `off` (FREE for a free slot or an offset outside the cluster).
    pub fn word(&self, off: usize) -> Word {
        if off >= N {
            return Word::FREE;
        }
        match self.table() {
            Some(t) => Word(t.words[off].load(Ordering::Relaxed)),
            None => Word::FREE,
        }
    }

    /// Replace the word of the in-use slot `off` by `w` (non-free). The slot's COUNT field is
    /// kept: counts change only through [`ClusterGuard::set_count`].
    pub fn set(&mut self, off: usize, w: Word) -> Result<(), SwapError> {
        self.in_use(off)?;
        if w.is_free() {
            return Err(SwapError::BadFolio { entry: self.entry(off).0, order: 0 });
        }
        let old = self.word(off);
        let t = self.table().ok_or(SwapError::NotInUse(self.entry(off).0))?;
        t.words[off].store(w.with_count(old.count()).0, Ordering::Release);
        Ok(())
    }

    /// The full swap count of slot `off`: the inline count, or the extend table's when the
    /// inline count is saturated. 0 for a free slot.
    pub fn count(&self, off: usize) -> u32 {
        let w = self.word(off);
        if w.count() == COUNT_MAX {
            self.st.extend.as_ref().map_or(u32::from(COUNT_MAX), |x| x[off])
        } else {
            u32::from(w.count())
        }
    }

    /// Set the full swap count of the in-use slot `off`. Counts of 15 and more live in the
    /// cluster's extend table, allocated on first need and freed when no slot needs it.
    pub fn set_count(&mut self, off: usize, n: u32) -> Result<(), SwapError> {
        self.in_use(off)?;
        let old = self.word(off);
        let was_ext = old.count() == COUNT_MAX;
        let space = self.space;
        let st = &mut *self.st;
        let t = {
            let p = space.cluster(self.idx).table.load(Ordering::Relaxed);
            // SAFETY: in use implies a live table; we hold the cluster lock (see `table`).
            unsafe { &*p }
        };
        if n < u32::from(COUNT_MAX) {
            t.words[off].store(old.with_count(n as u8).0, Ordering::Release);
            if was_ext {
                if let Some(x) = st.extend.as_mut() {
                    x[off] = 0;
                }
                st.extend_used -= 1;
                if st.extend_used == 0 && st.extend.take().is_some() {
                    space.live_extend.fetch_sub(1, Ordering::Relaxed);
                }
            }
        } else {
            let x = st.extend.get_or_insert_with(|| {
                space.live_extend.fetch_add(1, Ordering::Relaxed);
                Box::new([0u32; N])
            });
            x[off] = n;
            if !was_ext {
                st.extend_used += 1;
                t.words[off].store(old.with_count(COUNT_MAX).0, Ordering::Release);
            }
        }
        Ok(())
    }

    /// Free the `n` slots from `off`: words to FREE, extend counts cleared, the cluster's
    /// count down. When the count reaches 0 the table is retired (a racing lock-free reader
    /// still sees FREE words); the cluster moves lists when the guard drops. Every slot must
    /// be in use, else nothing changes and `NotInUse` names the first free one.
    pub fn free_range(&mut self, off: usize, n: usize) -> Result<(), SwapError> {
        if n == 0 {
            return Ok(());
        }
        if off >= N || n > N - off {
            return Err(SwapError::OutOfRange((self.idx * N) as u64 + off as u64 + n as u64 - 1));
        }
        if let Some(i) = (off..off + n).find(|&i| !bit(&self.st.used, i)) {
            return Err(SwapError::NotInUse(self.entry(i).0));
        }
        let space = self.space;
        let idx = self.idx;
        let st = &mut *self.st;
        let p = space.cluster(idx).table.load(Ordering::Relaxed);
        // SAFETY: in-use slots imply a live table; we hold the cluster lock.
        let t = unsafe { &*p };
        for i in off..off + n {
            let w = Word(t.words[i].load(Ordering::Relaxed));
            if w.count() == COUNT_MAX {
                if let Some(x) = st.extend.as_mut() {
                    x[i] = 0;
                }
                st.extend_used -= 1;
            }
            t.words[i].store(0, Ordering::Release);
        }
        if st.extend_used == 0 && st.extend.take().is_some() {
            space.live_extend.fetch_sub(1, Ordering::Relaxed);
        }
        set_bits(&mut st.used, off, n, false);
        st.count -= n as u16;
        space.used_slots.fetch_sub(n, Ordering::Relaxed);
        self.dirty = true;
        if st.count == 0 {
            space.retire_table(idx);
        }
        Ok(())
    }
}

impl Drop for ClusterGuard<'_> {
    fn drop(&mut self) {
        if self.dirty {
            let st = &mut *self.st;
            self.space.relocate_after_free(self.idx, st);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn space_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<SwapSpace>();
        check::<std::sync::Arc<SwapSpace>>();
    }

    fn space(clusters: usize, policy: FragPolicy) -> SwapSpace {
        SwapSpace::new(SpaceConfig {
            nr_slots: (clusters * N) as u64,
            frag_policy: policy,
            discard: false,
            nr_shards: 1,
        })
        .unwrap()
    }

    #[test]
    fn alloc_load_free_round_trip() {
        let s = space(2, FragPolicy::ScanOne);
        let e = s.alloc(2, &mut |i| Word::stored(1, 0, i as u64, 1)).unwrap();
        assert_eq!(e.0 % 4, 0);
        for i in 0..4 {
            assert_eq!(s.load(e.add(i)).unwrap().payload(), i);
        }
        assert_eq!(s.used_slots(), 4);
        assert_eq!(s.live_tables(), 1);
        s.check_invariants().unwrap();
        {
            let mut g = s.lock_cluster(e).unwrap();
            g.free_range(e.offset(), 4).unwrap();
            assert_eq!(g.free_range(e.offset(), 1), Err(SwapError::NotInUse(e.0)));
        }
        assert_eq!(s.load(e).unwrap(), Word::FREE);
        assert_eq!(s.live_tables(), 0);
        s.check_invariants().unwrap();
        assert_eq!(s.load(SwapEntry(s.nr_slots())), Err(SwapError::OutOfRange(s.nr_slots())));
    }

    #[test]
    fn counts_overflow_into_extend_table_and_back() {
        let s = space(1, FragPolicy::ScanOne);
        let e = s.alloc(0, &mut |_| Word::zero(0, 1)).unwrap();
        let mut g = s.lock_cluster(e).unwrap();
        let off = e.offset();
        for n in [14u32, 15, 70000, 15, 14, 3] {
            g.set_count(off, n).unwrap();
            assert_eq!(g.count(off), n);
            assert_eq!(s.live_extend_tables(), usize::from(n >= 15));
        }
        g.set(off, Word::stored(2, 1, 99, 7)).unwrap();
        assert_eq!(g.count(off), 3, "set keeps the count");
        assert_eq!(g.word(off).payload(), 99);
        drop(g);
        s.check_invariants().unwrap();
    }

    #[test]
    fn order0_never_fails_while_a_slot_is_free() {
        for policy in [FragPolicy::ScanOne, FragPolicy::Buckets] {
            let s = space(3, policy);
            let mut held = Vec::new();
            // Fill with order-4 folios, free one slot in each, then order 0 must find them.
            while let Ok(e) = s.alloc(4, &mut |_| Word::zero(0, 1)) {
                held.push(e);
            }
            assert_eq!(s.used_slots(), 3 * N);
            for e in held.iter().step_by(7) {
                s.lock_cluster(*e).unwrap().free_range(e.offset() + 3, 1).unwrap();
            }
            let free = s.nr_slots() as usize - s.used_slots();
            for _ in 0..free {
                s.alloc(0, &mut |_| Word::zero(0, 1)).unwrap();
            }
            assert_eq!(s.alloc(0, &mut |_| Word::zero(0, 1)), Err(SwapError::NoSpace { order: 0 }));
            s.check_invariants().unwrap();
        }
    }

    #[test]
    fn metadata_follows_real_allocations() {
        let s = space(64, FragPolicy::Buckets);
        let empty = s.metadata_bytes();
        let per_cluster = std::mem::size_of::<Cluster>() + 10;
        assert!(per_cluster <= 128, "cluster state grew to {per_cluster} bytes");
        // No cluster is ready before the first allocation: they cost nothing yet.
        assert!(empty < 16 * 1024, "empty space costs {empty} bytes");
        let e = s.alloc(0, &mut |_| Word::zero(0, 1)).unwrap();
        // One cluster made ready, with its table.
        let one = empty + per_cluster;
        assert_eq!(s.metadata_bytes(), one + std::mem::size_of::<SwapTable>());
        s.lock_cluster(e).unwrap().set_count(e.offset(), 99).unwrap();
        assert_eq!(s.metadata_bytes(), one + std::mem::size_of::<SwapTable>() + 4 * N);
        s.lock_cluster(e).unwrap().free_range(e.offset(), 1).unwrap();
        // The table goes; the cluster stays ready.
        assert_eq!(s.metadata_bytes(), one);
        s.check_invariants().unwrap();
    }

    #[test]
    fn bad_init_word_allocates_nothing() {
        let s = space(1, FragPolicy::ScanOne);
        let r = s.alloc(3, &mut |i| if i == 5 { Word::FREE } else { Word::zero(0, 1) });
        assert!(matches!(r, Err(SwapError::BadFolio { .. })));
        assert_eq!(s.used_slots(), 0);
        assert_eq!(s.live_tables(), 0);
        s.check_invariants().unwrap();
    }

    #[test]
    fn discard_list_holds_emptied_clusters() {
        let s =
            SwapSpace::new(SpaceConfig { nr_slots: 2 * N as u64, discard: true, nr_shards: 1, ..Default::default() })
                .unwrap();
        let e = s.alloc(9, &mut |_| Word::zero(0, 1)).unwrap();
        s.lock_cluster(e).unwrap().free_range(0, N).unwrap();
        assert_eq!(s.alloc_stats().discard_clusters, 1);
        s.check_invariants().unwrap();
        let mut seen = Vec::new();
        assert_eq!(s.process_discards(&mut |c| seen.push(c)), 1);
        assert_eq!(seen, vec![e.cluster()]);
        assert_eq!(s.alloc_stats().free_clusters, 2);
        s.check_invariants().unwrap();
    }
}
