//! Virtual swap layer: the [`Engine`] the pager calls (Nhat Pham, "Virtual Swap Space" RFC series).
//!
//! The engine owns one *virtual* [`SwapSpace`]: the entries callers hold are slots in it, and
//! each slot's table word says where the data is (ZERO, STORED in tier T under handle H, or
//! CACHED in a swap-cache folio). Data moves between tiers (writeback, explicit moves, online
//! drain, backend compaction) by rewriting words under the cluster lock, so the entry a caller
//! holds never changes.
//!
//! This file holds the engine's state ([`Engine`], [`EngineConfig`], [`Location`]) and the
//! queries that only read it. Each operation on it is a file of its own, from the bottom up:
//! - `tiers`: the tiers the engine holds (their state, online flag and in-flight stores), and
//!   the passes a backend runs over its own data through the relocate hook (compaction,
//!   recompression), fork sharing and idle marks;
//! - `stamps`: the per-slot age stamps;
//! - `store`: storing an object's data in a tier (limits, fallback to the next tier) and
//!   freeing it, with the group's charge;
//! - `finish`: the owner of a swap-cache folio finishing it (the folio leaving the cache);
//! - `swap_out`, `swap_in`, `counts` (dup, put, count): the fault path's operations;
//! - `mover`: moving one object to another tier;
//! - `passes`: writeback (second chance, by age) and promotion, over the whole space;
//! - `drain`: the online drain of a tier, batched per cluster.
//!
//! # Objects
//! A folio swapped out at order m is stored whole: its 2^m slots all hold the same STORED word
//! (same tier and handle) and form one *object*. A slot whose count drops to 0 stays allocated
//! (a count-0 STORED slot) until every slot of its object has count 0; then the slots are freed
//! and the backend data is freed. So the backend data of an object is freed exactly when all
//! its counts are 0 and it is not cached. ZERO slots are independent objects of one slot.
//!
//! # Synchronization
//! Locking: the code of this file takes no lock ([`Engine::location`] reads a word
//! lock-free). The rules every file of the engine follows (each file's "Locking:" says which
//! locks its code takes):
//! - Words change only under their cluster lock (via [`SwapSpace::lock_cluster`]).
//! - Everything that reads backend data (swap-in, move, writeback, drain) first takes the
//!   object into the swap cache with [`SwapCache::add_or_get`]; whoever adds the folio owns
//!   the read, everyone else waits on it. A mover therefore never frees data that a swap-in is
//!   reading, and a swap-in during a drain reads either the old or the new location, whole.
//!   The owner finishes the folio under the cluster lock (`finish.rs`).
//! - Lock order: cluster lock -> backend internal locks (only `Backend::free` runs under a
//!   cluster lock); swap-cache locks are leaves. Backend `store`/`load` run with no lock held.

mod counts;
mod drain;
mod finish;
mod mover;
mod passes;
mod stamps;
mod store;
mod swap_in;
mod swap_out;
mod tiers;

#[cfg(all(test, not(loom)))]
mod tests;

use crate::backend::Backend;
use crate::cluster::{FragPolicy, SpaceConfig, SwapSpace};
use crate::error::SwapError;
use crate::group::Groups;
use crate::stats::Stats;
use crate::swap_cache::{SwapCache, FOLIO_INFLIGHT};
use crate::swap_table::{Kind, SwapEntry, MAX_ORDER, PAGE_SIZE, SLOTS_PER_CLUSTER, TIER_MAX};
use crate::sync::AtomicU64;
use stamps::Stamps;
use std::sync::atomic::AtomicUsize as StdAtomicUsize;
use std::sync::Arc;
use tiers::Tier;

pub use swap_in::{PageIn, SWAP_IN_BATCH};

/// Configuration of an [`Engine`].
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Size of the virtual swap space in slots (pages).
    pub virtual_slots: u64,
    /// Fragment policy of the virtual space's allocator.
    pub frag_policy: FragPolicy,
    /// Detect all-zero folios and store nothing for them.
    pub zero_elision: bool,
    /// Number of groups (1..=4096).
    pub nr_groups: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig { virtual_slots: 1 << 20, frag_policy: FragPolicy::default(), zero_elision: true, nr_groups: 64 }
    }
}

/// Where an entry's data is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// An all-zero page.
    Zero,
    /// Stored in this tier.
    Tier(usize),
    /// Only in the swap cache (a drained entry kept in memory), or in transit.
    Cache,
}

/// The virtual swap engine.
pub struct Engine {
    space: SwapSpace,
    cache: SwapCache,
    tiers: Vec<Tier>,
    groups: Groups,
    stats: Stats,
    zero_elision: bool,
    nr_slots: u64,
    wb_cursor: AtomicU64,
    age_cursor: AtomicU64,
    promote_cursor: AtomicU64,
    /// Per virtual slot: when it was last stored or swapped in, for writeback by age
    /// (`stamps.rs`).
    stamps: Stamps,
    /// Threads [`Engine::drain_tier`] uses (the caller's included; 0 = the CPUs, at most 4, decided then).
    drain_threads: StdAtomicUsize,
}

/// Order of a folio of `len` bytes.
fn order_of_len(len: usize) -> Result<u8, SwapError> {
    let pages = len / PAGE_SIZE;
    if len == 0
        || !len.is_multiple_of(PAGE_SIZE)
        || !pages.is_power_of_two()
        || pages.trailing_zeros() > u32::from(MAX_ORDER)
    {
        return Err(SwapError::BadLength { len, order: (pages.max(1).trailing_zeros() as u8).min(MAX_ORDER) });
    }
    Ok(pages.trailing_zeros() as u8)
}

impl Engine {
    /// An engine over `tiers`, tried in order on swap-out (tier index = position, at most 8).
    pub fn new(cfg: EngineConfig, tiers: Vec<Arc<dyn Backend>>) -> Result<Self, SwapError> {
        if tiers.len() > usize::from(TIER_MAX) + 1 {
            return Err(SwapError::Config(format!("at most {} tiers", usize::from(TIER_MAX) + 1)));
        }
        if cfg.virtual_slots == 0 {
            return Err(SwapError::Config("virtual swap space of 0 slots".into()));
        }
        let space = SwapSpace::new(SpaceConfig {
            nr_slots: cfg.virtual_slots,
            frag_policy: cfg.frag_policy,
            discard: false,
            ..SpaceConfig::default()
        })?;
        let nr_slots = space.nr_slots();
        Ok(Engine {
            space,
            cache: SwapCache::new(),
            tiers: tiers.into_iter().map(Tier::new).collect(),
            groups: Groups::new(cfg.nr_groups)?,
            stats: Stats::default(),
            zero_elision: cfg.zero_elision,
            nr_slots,
            wb_cursor: AtomicU64::new(0),
            age_cursor: AtomicU64::new(0),
            promote_cursor: AtomicU64::new(0),
            stamps: Stamps::new(nr_slots as usize),
            // 0: decided at the first drain (`available_parallelism` reads the cgroup's CPU
            // quota files, a cost at every process's start under `uswap run`, for a drain that
            // most never make).
            drain_threads: StdAtomicUsize::new(if cfg!(any(loom, shuttle)) { 1 } else { 0 }),
        })
    }

    /// Kernel-named counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// Groups (limits and counters).
    pub fn groups(&self) -> &Groups {
        &self.groups
    }
    /// The virtual swap space.
    pub fn space(&self) -> &SwapSpace {
        &self.space
    }
    /// The swap cache.
    pub fn cache(&self) -> &SwapCache {
        &self.cache
    }
    /// Number of tiers.
    pub fn nr_tiers(&self) -> usize {
        self.tiers.len()
    }
    /// Slots in the virtual space.
    pub fn nr_slots(&self) -> u64 {
        self.nr_slots
    }

    /// The kind of tier that holds the data of `entry` now (`None`: zero, cached, not in
    /// use). One lock-free word load: the fault path asks it to decide on readahead.
    pub fn tier_kind(&self, entry: SwapEntry) -> Option<crate::backend::TierKind> {
        match self.location(entry) {
            Ok(Location::Tier(t)) => self.tiers.get(t).map(|t| t.kind),
            _ => None,
        }
    }

    /// Where the data of `entry` is now.
    pub fn location(&self, entry: SwapEntry) -> Result<Location, SwapError> {
        let w = self.space.load(entry)?;
        match w.kind() {
            Kind::Zero => Ok(Location::Zero),
            Kind::Stored => Ok(Location::Tier(usize::from(w.tier()))),
            Kind::Cached if w.payload() != FOLIO_INFLIGHT => Ok(Location::Cache),
            _ => Err(SwapError::NotInUse(entry.0)),
        }
    }

    /// `Ok` if `[entry, entry + nr)` is inside the space and inside one cluster.
    fn check_range(&self, entry: SwapEntry, nr: usize) -> Result<(), SwapError> {
        if entry.0 >= self.nr_slots {
            return Err(SwapError::OutOfRange(entry.0));
        }
        if nr == 0 || entry.offset() + nr > SLOTS_PER_CLUSTER {
            return Err(SwapError::BadFolio { entry: entry.0, order: (nr.max(1).ilog2() as u8).min(MAX_ORDER) });
        }
        Ok(())
    }
}
