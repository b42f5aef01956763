//! Virtual swap layer: the [`Engine`] the pager calls (Nhat Pham, "Virtual Swap Space" RFC series).
//!
//! The engine owns one *virtual* [`SwapSpace`]: the entries callers hold are slots in it, and
//! each slot's table word says where the data is (ZERO, STORED in tier T under handle H, or
//! CACHED in a swap-cache folio). Data moves between tiers (writeback, explicit moves, online
//! drain, backend compaction) by rewriting words under the cluster lock, so the entry a caller
//! holds never changes.
//!
//! # Objects
//! A folio swapped out at order m is stored whole: its 2^m slots all hold the same STORED word
//! (same tier and handle) and form one *object*. A slot whose count drops to 0 stays allocated
//! (a count-0 STORED slot) until every slot of its object has count 0; then the slots are freed
//! and the backend data is freed. So the backend data of an object is freed exactly when all
//! its counts are 0 and it is not cached. ZERO slots are independent objects of one slot.
//!
//! # Synchronization
//! - Words change only under their cluster lock (via [`SwapSpace::lock_cluster`]).
//! - Everything that reads backend data (swap-in, move, writeback, drain) first takes the
//!   object into the swap cache with [`SwapCache::add_or_get`]; whoever adds the folio owns
//!   the read, everyone else waits on it. A mover therefore never frees data that a swap-in is
//!   reading, and a swap-in during a drain reads either the old or the new location, whole.
//! - The owner of a folio finishes it under the cluster lock: it puts back the (possibly new)
//!   backing word, or frees the slots if every count reached 0, or keeps the folio as the only
//!   copy (drain into memory) and unlocks it while still holding the cluster lock.
//! - Slots being stored by `swap_out` hold a placeholder CACHED word (`FOLIO_INFLIGHT`); a
//!   per-tier in-flight counter lets `drain_tier` wait for stores that chose the tier before
//!   it went offline.
//! - Lock order: cluster lock -> backend internal locks (only `Backend::free` runs under a
//!   cluster lock); swap-cache locks are leaves. Backend `store`/`load` run with no lock held.
//! - The batched drain holds one cluster lock to take all of a cluster's objects into the cache
//!   (their folios LOCKED, so swap-ins wait on them as on any mover), loads and stores with no
//!   lock held, then holds it once more to finish them all; its worker threads (scoped) never
//!   hold two cluster locks. No new lock class.
//! - Per-slot age stamps are relaxed atomics outside any lock (a heuristic for writeback by
//!   age, not synchronization).
//!
//! # Tiers both ways
//! Down: [`Engine::writeback`] (second chance, when the pool is full) and
//! [`Engine::writeback_older_than`] (proactive, by age). Up: [`Engine::promote`] moves
//! file-tier objects swapped in since they got there (their REF bit) back into the pool. All are
//! explicit passes; the fault path only sets REF and the age stamp.
//!
//! # Charging
//! Every word records its group. A group is charged `swapped_pages` for every slot in use,
//! `pool_bytes` for data in RAM tiers (pool and memory kinds) and `swap_pages` only while data
//! is on a [`TierKind::File`] tier (charged at store or writeback time, uncharged when the
//! data leaves the tier).

use crate::backend::{Backend, LoadReq, Stored, TierKind, Usage};
use crate::cluster::{ClusterGuard, FragPolicy, SpaceConfig, SwapSpace};
use crate::error::{SwapError, TierError};
use crate::fails::{FailCounts, FailKind, TierFails};
use crate::group::Groups;
use crate::stats::{Event, OrderEvent, Stats};
use crate::swap_cache::{
    location, object_extent, AddMode, Deleted, LockedFolio, Lookup, RefBit, SwapCache, FOLIO_INFLIGHT,
};
use crate::swap_table::{Kind, SwapEntry, Word, MAX_ORDER, PAGE_SIZE, PAYLOAD_MAX, SLOTS_PER_CLUSTER, TIER_MAX};
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use std::sync::atomic::{AtomicU32 as StdAtomicU32, AtomicUsize as StdAtomicUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

struct Tier {
    backend: Arc<dyn Backend>,
    kind: TierKind,
    online: AtomicBool,
    /// Stores that chose this tier and have not yet published their words.
    inflight: AtomicU64,
    /// Its store failures ([`crate::fails`]).
    fails: TierFails,
}

/// Whether a store into a RAM tier may pass the group's pool cap.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Cap {
    /// The cap holds: over it, the page goes to the next tier.
    Keep,
    /// Past the cap: every tier outside RAM failed or was full for this page, and a pool a
    /// little larger than its share is better than a page that cannot leave memory (the pool
    /// is still charged to the limit, so the resident set shrinks to make room).
    Pass,
}

/// What to do when a move meets a folio somebody else holds.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Busy {
    Wait,
    Skip,
}

/// Where a move sends the data.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Dest {
    /// Into this tier.
    Tier(usize),
    /// Out of this tier: into the first other online tier that accepts, else into memory.
    Drain(usize),
}

enum Moved {
    Pages(u64),
    NotNeeded,
    Busy,
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
    /// Per virtual slot: when it was last stored or swapped in, in ms since `epoch` (+1; 0 =
    /// never), for writeback by age. A heuristic, not synchronization: relaxed, and a stale
    /// value only makes an object look older or younger. A mapping of its own, so only the
    /// pages of slots ever touched become resident (4 bytes per slot).
    stamps: Stamps,
    epoch: Instant,
    /// Threads [`Engine::drain_tier`] uses (the caller's included; 0 = the CPUs, at most 4, decided then).
    drain_threads: StdAtomicUsize,
}

/// Outcome of one object of a drain batch.
enum DrainOutcome {
    /// Loaded; new backing (FREE = kept in memory), and the tier it was stored in.
    Moved(Word, Option<usize>),
    /// The load or the store failed: the object stays where it was.
    Failed(SwapError),
}

/// What is left to do for one object of a drain batch once its cluster lock is dropped.
struct DrainDone {
    group: u16,
    /// What leaving the cache did (dead backing to free, slots freed).
    del: Option<Deleted>,
    /// The old location, to free (the object moved).
    old_dead: Option<Word>,
    pages: u64,
    /// The tier the object was stored in (its in-flight count to lower).
    stored_in: Option<usize>,
}

/// Per-slot age stamps in an anonymous mapping of their own: zero pages until written, so
/// only the pages of slots ever used become resident, whatever the process's allocator does
/// with `calloc` (the LD_PRELOAD library's heap would commit it all).
struct Stamps {
    ptr: std::ptr::NonNull<StdAtomicU32>,
    len: usize,
}

// SAFETY: the mapping is owned by the struct and only accessed through atomics.
unsafe impl Send for Stamps {}
// SAFETY: as above.
unsafe impl Sync for Stamps {}

impl Stamps {
    fn new(n: usize) -> Stamps {
        let bytes = (n.max(1) * 4).next_multiple_of(PAGE_SIZE);
        match crate::page_heap::map(bytes, true).and_then(|p| std::ptr::NonNull::new(p as *mut StdAtomicU32)) {
            Some(ptr) => Stamps { ptr, len: n },
            // No address space: no stamps (every object then looks as old as the engine).
            None => Stamps { ptr: std::ptr::NonNull::dangling(), len: 0 },
        }
    }
    fn get(&self, r: std::ops::Range<usize>) -> Option<&[StdAtomicU32]> {
        if r.start > r.end || r.end > self.len {
            return None;
        }
        // SAFETY: `ptr` maps `len` zero-initialised `u32`s (a valid `AtomicU32` bit pattern,
        // same size and alignment) for as long as `self` lives; `r` is inside it.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(r.start), r.end - r.start) })
    }
}

impl Drop for Stamps {
    fn drop(&mut self) {
        if self.len > 0 {
            let bytes = (self.len * 4).next_multiple_of(PAGE_SIZE);
            // SAFETY: unmapping the mapping made in `new`, which nothing references any more.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), bytes) };
        }
    }
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

use crate::tier::zero::is_zero;

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
            tiers: tiers
                .into_iter()
                .map(|b| Tier {
                    kind: b.kind(),
                    backend: b,
                    online: AtomicBool::new(true),
                    inflight: AtomicU64::new(0),
                    fails: TierFails::default(),
                })
                .collect(),
            groups: Groups::new(cfg.nr_groups)?,
            stats: Stats::default(),
            zero_elision: cfg.zero_elision,
            nr_slots,
            wb_cursor: AtomicU64::new(0),
            age_cursor: AtomicU64::new(0),
            promote_cursor: AtomicU64::new(0),
            stamps: Stamps::new(nr_slots as usize),
            epoch: Instant::now(),
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
    fn tier(&self, t: usize) -> Result<&Tier, SwapError> {
        self.tiers.get(t).ok_or_else(|| SwapError::Config(format!("no tier {t}")))
    }
    /// Occupancy of tier `t`.
    pub fn tier_usage(&self, t: usize) -> Result<Usage, SwapError> {
        Ok(self.tier(t)?.backend.usage())
    }
    /// Store failures of tier `t` so far ([`crate::fails`]).
    pub fn tier_fails(&self, t: usize) -> Result<FailCounts, SwapError> {
        Ok(self.tier(t)?.fails.snapshot())
    }
    /// The name of tier `t` (`zpool:lz4`, `file:/var/tmp/...`).
    pub fn tier_name(&self, t: usize) -> Result<String, SwapError> {
        Ok(self.tier(t)?.backend.name().to_string())
    }
    /// Memory the tiers hold in this process (see [`Backend::ram_bytes`]): the RSS of the
    /// compressed pool, fragmentation and spare memory included.
    pub fn ram_bytes(&self) -> u64 {
        self.tiers.iter().map(|t| t.backend.ram_bytes()).sum()
    }
    /// Whether tier `t` takes new stores.
    pub fn tier_online(&self, t: usize) -> Result<bool, SwapError> {
        Ok(self.tier(t)?.online.load(Ordering::SeqCst))
    }
    /// Put tier `t` back online (after a drain) or take it offline without draining.
    pub fn set_tier_online(&self, t: usize, online: bool) -> Result<(), SwapError> {
        self.tier(t)?.online.store(online, Ordering::SeqCst);
        Ok(())
    }

    /// Threads [`Engine::drain_tier`] uses, the caller's included (default: the CPUs, at most
    /// 4; 1 = no extra thread).
    pub fn set_drain_threads(&self, n: usize) {
        self.drain_threads.store(n.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    fn now_stamp(&self) -> u32 {
        (self.epoch.elapsed().as_millis() as u32).wrapping_add(1).max(1)
    }

    /// Record an access to `[entry, entry + n)` (allocation-free, lock-free: one clock read and
    /// relaxed stores; it runs on the fault path).
    fn touch(&self, entry: SwapEntry, n: usize) {
        let now = self.now_stamp();
        let lo = entry.0 as usize;
        if let Some(s) = self.stamps.get(lo..lo.saturating_add(n)) {
            for a in s {
                a.store(now, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Time since any slot of the object `[first, first + n)` was last stored or swapped in.
    fn idle_for(&self, first: usize, n: usize) -> Duration {
        let now = self.now_stamp();
        let newest = self
            .stamps
            .get(first..first + n)
            .map(|s| s.iter().map(|a| now.wrapping_sub(a.load(std::sync::atomic::Ordering::Relaxed))).min())
            .unwrap_or_default()
            .unwrap_or(0);
        Duration::from_millis(u64::from(newest))
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

    fn check_range(&self, entry: SwapEntry, nr: usize) -> Result<(), SwapError> {
        if entry.0 >= self.nr_slots {
            return Err(SwapError::OutOfRange(entry.0));
        }
        if nr == 0 || entry.offset() + nr > SLOTS_PER_CLUSTER {
            return Err(SwapError::BadFolio { entry: entry.0, order: (nr.max(1).ilog2() as u8).min(MAX_ORDER) });
        }
        Ok(())
    }

    /// Free an object's data in its tier and uncharge its group.
    fn free_data(&self, group: u16, loc: Word, pages: u64) {
        if loc.kind() != Kind::Stored {
            return;
        }
        let Some(t) = self.tiers.get(usize::from(loc.tier())) else { return };
        let bytes = t.backend.free(loc.payload());
        match t.kind {
            TierKind::File => self.groups.uncharge_swap(group, pages),
            TierKind::Pool | TierKind::Memory => self.groups.uncharge_pool(group, bytes),
            TierKind::Remote => {}
        }
    }

    /// Store `data` in tier `t` (checking the group's limits, the pool cap as `cap` says, and
    /// charging it). On success the tier's in-flight count is raised; the caller lowers it
    /// once the words point at the data. A failure is counted in the tier's [`TierFails`]: an
    /// error that is one, or a rejection by a tier outside RAM (no free slot left).
    fn store_in(&self, t: usize, group: u16, data: &[u8], owner: SwapEntry, cap: Cap) -> Result<Stored, SwapError> {
        let tier = self.tier(t)?;
        let pages = (data.len() / PAGE_SIZE) as u64;
        let charged_swap = match tier.kind {
            TierKind::File => {
                if !self.groups.try_charge_swap(group, pages) {
                    return Err(SwapError::GroupLimit(group));
                }
                true
            }
            TierKind::Pool | TierKind::Memory => {
                if cap == Cap::Keep && !self.groups.may_pool(group) {
                    return Err(SwapError::GroupLimit(group));
                }
                false
            }
            TierKind::Remote => false,
        };
        let undo = || {
            tier.inflight.fetch_sub(1, Ordering::SeqCst);
            if charged_swap {
                self.groups.uncharge_swap(group, pages);
            }
        };
        tier.inflight.fetch_add(1, Ordering::SeqCst);
        if !tier.online.load(Ordering::SeqCst) {
            undo();
            return Err(SwapError::Tier(TierError::Reject));
        }
        match tier.backend.store(data, owner) {
            Ok(s) if s.handle <= PAYLOAD_MAX => {
                match tier.kind {
                    TierKind::Pool => self.stats.add(Event::Zswpout, pages),
                    TierKind::File => self.stats.add(Event::Pswpout, pages),
                    _ => {}
                }
                if matches!(tier.kind, TierKind::Pool | TierKind::Memory) {
                    self.groups.charge_pool(group, s.bytes);
                }
                Ok(s)
            }
            Ok(s) => {
                tier.backend.free(s.handle);
                undo();
                Err(SwapError::Tier(TierError::BadHandle(s.handle)))
            }
            Err(e) => {
                undo();
                if e == TierError::Reject {
                    // A file with no free slot for one page is full; one with no contiguous
                    // range for a large folio is fragmented, and the folio is split.
                    if tier.kind == TierKind::File && pages == 1 {
                        tier.fails.record(FailKind::Full, 0);
                    }
                } else {
                    tier.fails.record_error(&e);
                }
                Err(e.into())
            }
        }
    }

    /// True if `e` from a store of `pages` into `t` is the tier failing (full or in error)
    /// rather than declining by policy: the next tier may then take the page.
    fn is_failure(&self, t: usize, pages: u64, e: &SwapError) -> bool {
        match e {
            SwapError::Tier(TierError::Reject) => self.tiers[t].kind == TierKind::File && pages == 1,
            SwapError::Tier(te) => FailKind::of(te).is_some(),
            _ => false,
        }
    }

    /// Store `data` in the first online tier (other than `skip`) that takes it. A tier that
    /// fails (full, or an I/O error: [`crate::fails`]) is passed over for the next one
    /// (`swpout_tier_fallback`); when no tier outside RAM could take a fresh swap-out
    /// (`skip` None) that a RAM tier declined for the group's pool cap, that tier takes it
    /// past the cap (`zswpout_over_cap`). A large folio a file tier has no contiguous range
    /// for, and no other tier takes, is `NoSpace` (the caller splits it, as the kernel does a
    /// THP: `swpout_fallback`). What no tier takes is counted (`swpout_rejected`) and the
    /// first failure returned, so the caller keeps the page where it was.
    fn store_anywhere(
        &self,
        group: u16,
        data: &[u8],
        owner: SwapEntry,
        skip: Option<usize>,
    ) -> Result<(usize, Stored), SwapError> {
        let pages = (data.len() / PAGE_SIZE) as u64;
        // RAM tiers that declined for the pool cap, as a bit mask; and whether any tier
        // declined for one of the group's limits.
        let mut capped = 0u32;
        let mut limited = false;
        let mut failed: Option<SwapError> = None;
        // A file tier had no contiguous range for this large folio.
        let mut fragmented = false;
        for t in 0..self.tiers.len() {
            if Some(t) == skip || !self.tiers[t].online.load(Ordering::SeqCst) {
                continue;
            }
            match self.store_in(t, group, data, owner, Cap::Keep) {
                Ok(s) => {
                    if failed.is_some() {
                        self.stats.add(Event::SwpoutTierFallback, pages);
                    }
                    return Ok((t, s));
                }
                Err(SwapError::GroupLimit(_)) => {
                    limited = true;
                    if matches!(self.tiers[t].kind, TierKind::Pool | TierKind::Memory) {
                        capped |= 1 << t;
                    }
                }
                Err(SwapError::Tier(TierError::Reject)) if self.tiers[t].kind == TierKind::File && pages > 1 => {
                    fragmented = true;
                }
                Err(e) if self.is_failure(t, pages, &e) => {
                    failed.get_or_insert(e);
                }
                Err(SwapError::Tier(TierError::Reject)) => {}
                Err(e) => return Err(e),
            }
        }
        if failed.is_some() && skip.is_none() {
            for t in (0..self.tiers.len()).filter(|t| capped & (1 << t) != 0) {
                if let Ok(s) = self.store_in(t, group, data, owner, Cap::Pass) {
                    self.stats.add(Event::ZswpoutOverCap, pages);
                    return Ok((t, s));
                }
            }
        }
        if fragmented && skip.is_none() {
            return Err(SwapError::NoSpace { order: pages.trailing_zeros() as u8 });
        }
        if skip.is_none() {
            self.stats.add(Event::SwpoutRejected, pages);
        }
        Err(match failed {
            Some(e) => e,
            None if limited => SwapError::GroupLimit(group),
            None => SwapError::Tier(TierError::Reject),
        })
    }

    fn alloc(&self, order: u8, word: Word) -> Result<SwapEntry, SwapError> {
        self.space.alloc(order, &mut |_| word).inspect_err(|e| {
            if matches!(e, SwapError::NoSpace { .. }) {
                self.stats.add_order(OrderEvent::SwpoutFallback, order, 1);
            }
        })
    }

    /// Swap out one folio (`data.len()` = 4096 << order) for `group`. Returns the entry of
    /// its first slot; the 2^order slots have count 1 each. `NoSpace { order }` means no
    /// contiguous range is free (counted in `swpout_fallback`): split and retry.
    pub fn swap_out(&self, group: u16, data: &[u8]) -> Result<SwapEntry, SwapError> {
        let order = order_of_len(data.len())?;
        self.groups.check(group)?;
        let pages = 1u64 << order;
        if self.zero_elision && is_zero(data) {
            let e = self.alloc(order, Word::zero(group, 1))?;
            self.stats.add(Event::SwpoutZero, pages);
            self.stats.add_order(OrderEvent::Swpout, order, 1);
            self.groups.add_swapped(group, pages);
            return Ok(e);
        }
        let e = self.alloc(order, Word::cached(group, FOLIO_INFLIGHT, 1))?;
        let n = 1usize << order;
        let off = e.offset();
        match self.store_anywhere(group, data, e, None) {
            Ok((t, s)) => {
                let loc = Word::stored(0, t as u8, s.handle, 0);
                // REF = "used since it got here": a fresh store in a RAM tier gets its second
                // chance against writeback; on a file tier REF means a refault (promotion).
                let fresh_ref = self.tiers[t].kind != TierKind::File;
                let res = self.space.lock_cluster(e).and_then(|mut g| {
                    for i in off..off + n {
                        let w = g.word(i);
                        g.set(i, w.with_location_of(loc).with_referenced(fresh_ref))?;
                    }
                    Ok(())
                });
                self.tiers[t].inflight.fetch_sub(1, Ordering::SeqCst);
                if let Err(err) = res {
                    self.free_data(group, loc, pages);
                    return Err(err);
                }
                self.stats.add_order(OrderEvent::Swpout, order, 1);
                self.groups.add_swapped(group, pages);
                self.touch(e, n);
                Ok(e)
            }
            Err(err) => {
                if let Ok(mut g) = self.space.lock_cluster(e) {
                    let _ = g.free_range(off, n);
                }
                Err(err)
            }
        }
    }

    /// Finish a folio this thread owns, under its cluster lock: optionally drop one count
    /// on each slot of `put` first (all or none; returns whether it did), then take the folio
    /// out of the cache (restoring its backing, or freeing the slots if no count is left),
    /// or keep it as the only copy if it has no backing and counts remain. Unlocks the folio
    /// in every case.
    fn finish(&self, lf: LockedFolio<'_>, r: RefBit, put: Option<(SwapEntry, usize)>) -> Result<bool, SwapError> {
        let (first, order) = lf.swap();
        let n = 1usize << order;
        let mut g = match self.space.lock_cluster(first) {
            Ok(g) => g,
            Err(e) => {
                lf.unlock();
                return Err(e);
            }
        };
        let mut put_done = false;
        if let Some((e, nr)) = put {
            let o = e.offset();
            if lf.covers(e, nr as u64) && (o..o + nr).all(|i| g.count(i) >= 1) {
                for i in o..o + nr {
                    let c = g.count(i);
                    g.set_count(i, c - 1)?;
                }
                put_done = true;
            }
        }
        let res = self.leave_cache_locked(&mut g, &lf, r);
        let _ = lf.unlock();
        drop(g);
        if let Some(d) = res? {
            self.settle_deleted(d, n as u64);
        }
        Ok(put_done)
    }

    /// Take `lf` out of the cache under its cluster lock `g`, unless it must stay (no backing
    /// while a slot is still referenced: its memory is the only copy). What the returned
    /// [`Deleted`] names is freed by [`Self::settle_deleted`] once `g` is dropped.
    fn leave_cache_locked(
        &self,
        g: &mut ClusterGuard<'_>,
        lf: &LockedFolio<'_>,
        r: RefBit,
    ) -> Result<Option<Deleted>, SwapError> {
        let (first, order) = lf.swap();
        let s0 = first.offset();
        let all_zero = (s0..s0 + (1usize << order)).all(|i| g.count(i) == 0);
        if lf.backing().is_free() && !all_zero {
            return Ok(None);
        }
        self.cache.delete_locked(g, lf, r).map(Some)
    }

    /// Free what a folio leaving the cache left unnamed: its dead backing of `pages` pages, and
    /// the charge of the slots it freed.
    fn settle_deleted(&self, d: Deleted, pages: u64) {
        if let Some(dead) = d.dead_backing {
            self.free_data(d.group, dead, pages);
        }
        if d.freed_slots > 0 {
            self.groups.sub_swapped(d.group, d.freed_slots as u64);
        }
    }

    /// How REF ends up when an object moves into tier `t`: cleared on a file tier (there it
    /// means "refaulted since it got here", for promotion), as it was elsewhere.
    fn ref_on_move_into(&self, t: usize) -> RefBit {
        if self.tiers[t].kind == TierKind::File {
            RefBit::Clear
        } else {
            RefBit::Keep
        }
    }

    /// Load a folio just added to the cache from its backing.
    fn fill(&self, lf: &mut LockedFolio<'_>) -> Result<(), SwapError> {
        let b = lf.backing();
        let tier = self.tier(usize::from(b.tier()))?;
        let buf = lf.data_mut().ok_or_else(|| SwapError::Config("filling an uptodate folio".into()))?;
        let pages = (buf.len() / PAGE_SIZE) as u64;
        let t0 = crate::stats::now_ns();
        tier.backend.load(b.payload(), buf)?;
        self.count_swapin(tier.kind, pages, t0);
        lf.set_uptodate();
        Ok(())
    }

    /// Count `pages` loaded from a tier of `kind` by a load that began at `t0` (ns).
    fn count_swapin(&self, kind: TierKind, pages: u64, t0: u64) {
        let ns = crate::stats::now_ns().saturating_sub(t0);
        match kind {
            TierKind::Pool => {
                self.stats.add(Event::Zswpin, pages);
                self.stats.add(Event::ZswpinNs, ns);
            }
            TierKind::File => {
                self.stats.add(Event::Pswpin, pages);
                self.stats.add(Event::PswpinNs, ns);
            }
            _ => {}
        }
    }

    /// Decode the part `[entry, entry + out.len()/4096)` of the stored object of a folio just
    /// added to the cache and copy it into `out` (the folio is not made uptodate).
    fn fill_part(&self, lf: &mut LockedFolio<'_>, entry: SwapEntry, out: &mut [u8]) -> Result<(), SwapError> {
        let b = lf.backing();
        let first = lf.swap().0;
        let tier = self.tier(usize::from(b.tier()))?;
        let buf = lf.data_mut().ok_or_else(|| SwapError::Config("filling an uptodate folio".into()))?;
        let at = (entry.0 - first.0) as usize * PAGE_SIZE;
        let need = at + out.len();
        let t0 = crate::stats::now_ns();
        tier.backend.load_part(b.payload(), buf, at, out.len())?;
        self.count_swapin(tier.kind, (out.len() / PAGE_SIZE) as u64, t0);
        out.copy_from_slice(&buf[at..need]);
        Ok(())
    }

    /// Copy the part of folio data covering `[entry, entry + out.len()/4096)`.
    fn copy_out(first: SwapEntry, data: &[u8], entry: SwapEntry, out: &mut [u8]) {
        let at = (entry.0 - first.0) as usize * PAGE_SIZE;
        out.copy_from_slice(&data[at..at + out.len()]);
    }

    /// Read `[entry, entry + 2^order)` into `out` through the swap cache. With `free`, and if
    /// this thread loads the object itself, the counts are dropped in the same critical
    /// section (exclusive load); returns whether that happened.
    fn read_range(&self, entry: SwapEntry, order: u8, out: &mut [u8], free: bool) -> Result<bool, SwapError> {
        let mut failures = 0;
        loop {
            match self.cache.add_or_get(&self.space, entry, order, AddMode::SwapIn)? {
                Lookup::Zero => {
                    out.fill(0);
                    self.stats.add(Event::SwpinZero, 1 << order);
                    self.stats.add_order(OrderEvent::Swpin, order, 1);
                    return Ok(false);
                }
                Lookup::Mixed => {
                    if order == 0 {
                        return Err(SwapError::BadFolio { entry: entry.0, order });
                    }
                    self.stats.add_order(OrderEvent::SwpinFallback, order, 1);
                    let half = out.len() / 2;
                    let (a, b) = out.split_at_mut(half);
                    self.read_range(entry, order - 1, a, false)?;
                    self.read_range(entry.add(1 << (order - 1)), order - 1, b, false)?;
                    return Ok(false);
                }
                Lookup::Existing(f) => {
                    f.wait_unlocked();
                    if let Some(d) = f.data() {
                        Self::copy_out(f.swap().0, d, entry, out);
                        self.stats.add_order(OrderEvent::Swpin, order, 1);
                        return Ok(false);
                    }
                    if f.is_partial() {
                        // Its owner read only its own part; the words are back: look again.
                        drop(f);
                        std::thread::yield_now();
                        continue;
                    }
                    // The owner failed; the words are back: try again (and meet the error
                    // ourselves if it persists).
                    failures += 1;
                    if failures > 16 {
                        return Err(SwapError::Tier(TierError::Io {
                            errno: 0,
                            op: "swap_in",
                            msg: "the folio's loader failed repeatedly".into(),
                        }));
                    }
                }
                Lookup::Added(mut lf) => {
                    if !free && out.len() < lf.data_mut().map_or(0, |d| d.len()) {
                        // A part of a larger object (a 4 KiB fault on a 64 KiB folio): decode
                        // only up to the end of that part, copy it, and drop the folio
                        // (it is not uptodate; the words go back to the stored object).
                        let res = self.fill_part(&mut lf, entry, out);
                        lf.set_partial();
                        // A part read is a use of the object (REF: a second chance against
                        // writeback in RAM, a refault to promote on a file tier).
                        self.finish(lf, if res.is_ok() { RefBit::Set } else { RefBit::Keep }, None)?;
                        res?;
                        self.stats.add_order(OrderEvent::Swpin, order, 1);
                        return Ok(false);
                    }
                    if let Err(e) = self.fill(&mut lf) {
                        lf.set_error();
                        self.finish(lf, RefBit::Keep, None)?;
                        return Err(e);
                    }
                    let first = lf.swap().0;
                    if let Some(d) = lf.data() {
                        Self::copy_out(first, d, entry, out);
                    }
                    self.stats.add_order(OrderEvent::Swpin, order, 1);
                    let put = free.then_some((entry, 1usize << order));
                    return self.finish(lf, if free { RefBit::Keep } else { RefBit::Set }, put);
                }
                Lookup::Locked(lf) => {
                    // Not asked for; give it back.
                    let _ = lf.unlock();
                }
            }
        }
    }

    /// Preallocate swap-cache folios for swap-ins of up to `max_order` (see
    /// `SwapCache::reserve`), so a swap-in from a signal handler does not call malloc.
    pub fn reserve_swapin(&self, max_order: u8) -> Result<(), SwapError> {
        self.cache.reserve(max_order, 2)
    }

    /// Swap in `[entry, entry + out.len()/4096)` (`out.len()` = 4096 << order, `entry` aligned
    /// to it) through the swap cache. With `free`, drop the caller's count on each slot
    /// afterwards; when an object's last count goes, its slots and backend data are freed.
    pub fn swap_in(&self, entry: SwapEntry, out: &mut [u8], free: bool) -> Result<(), SwapError> {
        let order = order_of_len(out.len())?;
        let n = 1usize << order;
        self.check_range(entry, n)?;
        if entry.offset() & (n - 1) != 0 {
            return Err(SwapError::BadFolio { entry: entry.0, order });
        }
        self.touch(entry, n);
        let done = self.read_range(entry, order, out, free)?;
        if free && !done {
            self.put(entry, n)?;
        }
        Ok(())
    }

    /// Add `nr` to the count of each slot in `[entry, entry + nr)` (one cluster at most).
    pub fn dup(&self, entry: SwapEntry, nr: usize) -> Result<(), SwapError> {
        self.check_range(entry, nr)?;
        let mut g = self.space.lock_cluster(entry)?;
        let off = entry.offset();
        for i in off..off + nr {
            let w = g.word(i);
            let live = matches!(w.kind(), Kind::Zero | Kind::Stored)
                || (w.kind() == Kind::Cached && w.payload() != FOLIO_INFLIGHT);
            if !live || g.count(i) == 0 {
                return Err(SwapError::NotInUse(entry.0 + (i - off) as u64));
            }
            if g.count(i) == u32::MAX {
                return Err(SwapError::BadFolio { entry: entry.0 + (i - off) as u64, order: 0 });
            }
        }
        for i in off..off + nr {
            let c = g.count(i);
            g.set_count(i, c + 1)?;
        }
        Ok(())
    }

    /// Drop one count from each slot in `[entry, entry + nr)` (one cluster at most). All or
    /// nothing: if any slot is free or has count 0 (double put) nothing changes. Objects whose
    /// counts all reach 0 are freed with their backend data (a cached one when its folio
    /// leaves the cache).
    pub fn put(&self, entry: SwapEntry, nr: usize) -> Result<(), SwapError> {
        self.check_range(entry, nr)?;
        let mut g = self.space.lock_cluster(entry)?;
        let off = entry.offset();
        for i in off..off + nr {
            let w = g.word(i);
            let live = matches!(w.kind(), Kind::Zero | Kind::Stored)
                || (w.kind() == Kind::Cached && w.payload() != FOLIO_INFLIGHT);
            if !live || g.count(i) == 0 {
                return Err(SwapError::NotInUse(entry.0 + (i - off) as u64));
            }
        }
        for i in off..off + nr {
            let c = g.count(i);
            g.set_count(i, c - 1)?;
        }
        let mut i = off;
        while i < off + nr {
            let w = g.word(i);
            match w.kind() {
                Kind::Zero => {
                    if g.count(i) == 0 {
                        g.free_range(i, 1)?;
                        self.groups.sub_swapped(w.group(), 1);
                    }
                    i += 1;
                }
                Kind::Stored => {
                    let (s, m) = object_extent(&g, i);
                    let n = 1usize << m;
                    if (s..s + n).all(|j| g.count(j) == 0) {
                        g.free_range(s, n)?;
                        self.free_data(w.group(), location(w), n as u64);
                        self.groups.sub_swapped(w.group(), n as u64);
                    }
                    i = s + n;
                }
                Kind::Cached => {
                    let f = self
                        .cache
                        .try_get(w.payload())
                        .ok_or_else(|| SwapError::Config(format!("slot {:#x} names a freed folio", entry.0)))?;
                    let (first, order) = f.swap();
                    let (s, n) = (first.offset(), 1usize << order);
                    if !f.is_locked() && (s..s + n).all(|j| g.count(j) == 0) {
                        let d = self.cache.delete_locked(&mut g, &f, RefBit::Keep)?;
                        if let Some(dead) = d.dead_backing {
                            self.free_data(d.group, dead, n as u64);
                        }
                        self.groups.sub_swapped(d.group, d.freed_slots as u64);
                    }
                    i = (s + n).max(i + 1);
                }
                _ => i += 1,
            }
        }
        Ok(())
    }

    /// The swap count of one slot (0 for a free slot).
    pub fn count(&self, entry: SwapEntry) -> Result<u32, SwapError> {
        self.check_range(entry, 1)?;
        let g = self.space.lock_cluster(entry)?;
        Ok(if g.word(entry.offset()).is_free() { 0 } else { g.count(entry.offset()) })
    }

    /// Move the object holding `entry` to `dest`.
    fn move_object(&self, entry: SwapEntry, dest: Dest, busy: Busy) -> Result<Moved, SwapError> {
        let mut lf = loop {
            match self.cache.add_or_get(&self.space, entry, 0, AddMode::Move)? {
                Lookup::Zero | Lookup::Mixed => return Ok(Moved::NotNeeded),
                Lookup::Existing(f) => {
                    if busy == Busy::Skip {
                        return Ok(Moved::Busy);
                    }
                    f.wait_unlocked();
                }
                Lookup::Locked(lf) => break lf,
                Lookup::Added(mut lf) => {
                    let needed = match dest {
                        Dest::Tier(t) => usize::from(lf.backing().tier()) != t,
                        Dest::Drain(t) => usize::from(lf.backing().tier()) == t,
                    };
                    if !needed {
                        self.finish(lf, RefBit::Keep, None)?;
                        return Ok(Moved::NotNeeded);
                    }
                    if let Err(e) = self.fill(&mut lf) {
                        lf.set_error();
                        self.finish(lf, RefBit::Keep, None)?;
                        return Err(e);
                    }
                    break lf;
                }
            }
        };
        let old = lf.backing();
        let needed = match dest {
            Dest::Tier(t) => old.is_free() || usize::from(old.tier()) != t,
            Dest::Drain(t) => !old.is_free() && usize::from(old.tier()) == t,
        };
        if !needed {
            self.finish(lf, RefBit::Keep, None)?;
            return Ok(Moved::NotNeeded);
        }
        let (first, order) = lf.swap();
        let pages = 1u64 << order;
        let group = match self.space.load(first) {
            Ok(w) => w.group(),
            Err(e) => {
                self.finish(lf, RefBit::Keep, None)?;
                return Err(e);
            }
        };
        let stored = {
            let Some(data) = lf.data() else {
                self.finish(lf, RefBit::Keep, None)?;
                return Err(SwapError::Config("moving a folio that is not uptodate".into()));
            };
            match dest {
                Dest::Tier(t) => self.store_in(t, group, data, first, Cap::Keep).map(|s| (t, s)),
                Dest::Drain(from) => self.store_anywhere(group, data, first, Some(from)),
            }
        };
        match stored {
            Ok((t, s)) => {
                lf.set_backing(Word::stored(0, t as u8, s.handle, 0));
                let r = self.finish(lf, self.ref_on_move_into(t), None);
                self.tiers[t].inflight.fetch_sub(1, Ordering::SeqCst);
                r?;
                self.free_data(group, old, pages);
                Ok(Moved::Pages(pages))
            }
            Err(SwapError::Tier(TierError::Reject)) | Err(SwapError::GroupLimit(_))
                if matches!(dest, Dest::Drain(_)) =>
            {
                // No tier takes it: keep it in memory, as the only copy.
                lf.set_backing(Word::FREE);
                self.finish(lf, RefBit::Keep, None)?;
                self.free_data(group, old, pages);
                Ok(Moved::Pages(pages))
            }
            Err(e) => {
                self.finish(lf, RefBit::Keep, None)?;
                Err(e)
            }
        }
    }

    /// Move the data of the object holding `entry` into tier `to` (from wherever it is,
    /// including memory). Returns the pages moved (0 if it was already there, or is a zero
    /// page). The entry does not change; on error the data stays where it was.
    pub fn move_entry(&self, entry: SwapEntry, to: usize) -> Result<u64, SwapError> {
        self.check_range(entry, 1)?;
        self.tier(to)?;
        match self.move_object(entry, Dest::Tier(to), Busy::Wait)? {
            Moved::Pages(p) => Ok(p),
            _ => Ok(0),
        }
    }

    /// Call `f` for each slot in use in the virtual space, in slot order from `start`,
    /// wrapping around once. Stops when `f` returns false.
    fn for_each_used(
        &self,
        start: u64,
        f: &mut dyn FnMut(SwapEntry, Word) -> Result<bool, SwapError>,
    ) -> Result<(), SwapError> {
        let nr_clusters = self.space.nr_clusters();
        if nr_clusters == 0 {
            return Ok(());
        }
        let first = (start / SLOTS_PER_CLUSTER as u64) as usize % nr_clusters;
        // Clusters first..end, then 0..first.
        for (lo, hi) in [(first, nr_clusters), (0, first)] {
            let mut c = lo;
            while let Some(u) = self.space.next_used_cluster(c) {
                if u >= hi {
                    break;
                }
                let base = (u * SLOTS_PER_CLUSTER) as u64;
                for off in 0..SLOTS_PER_CLUSTER as u64 {
                    let e = SwapEntry(base + off);
                    let w = self.space.load(e)?;
                    if !w.is_free() && !f(e, w)? {
                        return Ok(());
                    }
                }
                c = u + 1;
            }
        }
        Ok(())
    }

    /// Second-chance writeback (the zswap shrinker analogue): move up to `max_pages` pages of
    /// cold objects from tier `from` to tier `to`. An object stored or accessed since the last
    /// pass (REF set) gets its bit cleared and is skipped once; objects being swapped in are
    /// skipped. Resumes where the previous call stopped. Counts `zswpwb`. Returns pages moved.
    pub fn writeback(&self, from: usize, to: usize, max_pages: u64) -> Result<u64, SwapError> {
        let mut moved = 0u64;
        // Two passes: an object the first finds referenced loses its bit and may go in the
        // second.
        for _pass in 0..2 {
            let mut second_chance = |e: SwapEntry, w: Word| {
                if w.referenced() {
                    self.clear_ref(e, w)?;
                    return Ok(false);
                }
                Ok(true)
            };
            moved += self.scan_move(from, to, max_pages - moved, &self.wb_cursor, &mut second_chance, Event::Zswpwb)?;
            if moved >= max_pages {
                break;
            }
        }
        Ok(moved)
    }

    /// Clear the REF bit of the object holding `e` if its word is still `seen`.
    fn clear_ref(&self, e: SwapEntry, seen: Word) -> Result<(), SwapError> {
        let mut g = self.space.lock_cluster(e)?;
        let off = e.offset();
        if location(g.word(off)) != location(seen) {
            return Ok(());
        }
        let (s, m) = object_extent(&g, off);
        for i in s..s + (1 << m) {
            let w = g.word(i);
            g.set(i, w.with_referenced(false))?;
        }
        Ok(())
    }

    /// Online drain ("swapoff") of tier `t`: take it offline so no new data goes to it, wait
    /// for stores already under way, then move every object it holds to the first other
    /// online tier that accepts it, or into memory (a resident swap-cache folio). Swap-ins
    /// may run concurrently and get correct data. The tier stays offline. Returns pages moved
    /// (counted as `swp_drain`).
    ///
    /// Batched and parallel: the clusters of the virtual space are handed out to
    /// [`Engine::set_drain_threads`] workers (scoped threads); a worker takes every object of
    /// tier `t` in a cluster into the swap cache under one cluster lock, loads them with one
    /// [`Backend::load_many`] (the file tier reads each run of adjacent slots with one read),
    /// stores them elsewhere if another tier takes them, and finishes them all under one
    /// cluster lock. An object whose load or store fails stays where it was; the drain goes on
    /// with the others and returns the first error (the tier stays offline, partly drained).
    pub fn drain_tier(&self, t: usize) -> Result<u64, SwapError> {
        let tier = self.tier(t)?;
        tier.online.store(false, Ordering::SeqCst);
        while tier.inflight.load(Ordering::SeqCst) != 0 {
            #[cfg(loom)]
            loom::thread::yield_now();
            #[cfg(not(loom))]
            std::thread::yield_now();
        }
        let threads = match self.drain_threads.load(std::sync::atomic::Ordering::Relaxed) {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            n => n,
        };
        let mut moved = 0u64;
        loop {
            let (m, found) = self.drain_pass(t, threads)?;
            moved += m;
            if found == 0 {
                return Ok(moved);
            }
        }
    }

    /// One pass of [`Self::drain_tier`] over every cluster: (pages moved, objects of tier `t` seen).
    fn drain_pass(&self, t: usize, threads: usize) -> Result<(u64, u64), SwapError> {
        let nr = self.space.nr_clusters();
        let next = StdAtomicUsize::new(0);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let work = || -> Result<(u64, u64), SwapError> {
            let (mut moved, mut found) = (0u64, 0u64);
            let mut first_err = None;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let c = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if c >= nr {
                    break;
                }
                if self.space.next_used_cluster(c) != Some(c) {
                    continue;
                }
                let (m, f, err) = self.drain_cluster(c, t);
                moved += m;
                found += f;
                if let Some(e) = err {
                    first_err.get_or_insert(e);
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
            self.stats.add(Event::SwpDrain, moved);
            match first_err {
                Some(e) => Err(e),
                None => Ok((moved, found)),
            }
        };
        if threads <= 1 {
            return work();
        }
        std::thread::scope(|sc| {
            let hs: Vec<_> = (1..threads.min(nr.max(1))).map(|_| sc.spawn(work)).collect();
            let mut acc = work();
            for h in hs {
                let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                acc = match (acc, r) {
                    (Ok((m1, f1)), Ok((m2, f2))) => Ok((m1 + m2, f1 + f2)),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                };
            }
            acc
        })
    }

    /// Drain the objects of tier `t` in cluster `c` as one batch (see [`Self::drain_tier`]).
    /// Returns (pages moved, objects of tier `t` seen, first error).
    fn drain_cluster(&self, c: usize, t: usize) -> (u64, u64, Option<SwapError>) {
        let mut batch: Vec<(LockedFolio<'_>, u16)> = Vec::new();
        let mut cached: Vec<SwapEntry> = Vec::new();
        let mut err: Option<SwapError> = None;
        let (mut moved, mut found) = (0u64, 0u64);
        // 1. Take every object of tier `t` into the cache under one cluster lock.
        match self.space.lock_cluster_index(c) {
            Ok(mut g) => {
                let mut off = 0;
                while off < SLOTS_PER_CLUSTER {
                    let w = g.word(off);
                    match w.kind() {
                        Kind::Stored if usize::from(w.tier()) == t => {
                            let (s, m) = object_extent(&g, off);
                            let e = g.entry(s);
                            match self.cache.add_or_get_locked(&mut g, e, 0, AddMode::Move) {
                                Ok(Lookup::Added(lf)) => batch.push((lf, w.group())),
                                // Not for a STORED slot; give it back if it ever happens.
                                Ok(Lookup::Locked(lf)) => drop(lf.unlock()),
                                Ok(_) => {}
                                Err(e) => {
                                    err = Some(e);
                                    break;
                                }
                            }
                            found += 1;
                            off = s + (1 << m);
                        }
                        // A cached folio hides its backing: if that backing is in tier `t`, the
                        // folio would put it back when it leaves the cache; handled one by one.
                        Kind::Cached if w.payload() != FOLIO_INFLIGHT => {
                            cached.push(g.entry(off));
                            off += 1;
                        }
                        _ => off += 1,
                    }
                }
            }
            Err(e) => return (0, 0, Some(e)),
        }
        // 2. Load them all (no lock held), then store each elsewhere if a tier takes it.
        let outcomes: Vec<DrainOutcome> = if batch.is_empty() {
            Vec::new()
        } else {
            let tier = &self.tiers[t];
            // The folios' buffers are fresh memory: fault them in with a few system calls
            // rather than one page fault per page while decoding.
            let mut bufs: Vec<(usize, usize)> = batch
                .iter_mut()
                .filter_map(|(lf, _)| lf.data_mut().map(|d| (d.as_mut_ptr() as usize, d.len())))
                .collect();
            crate::page_heap::populate(&mut bufs);
            let mut reqs: Vec<LoadReq<'_>> = batch
                .iter_mut()
                .map(|(lf, _)| {
                    let handle = lf.backing().payload();
                    LoadReq { handle, out: lf.data_mut().unwrap_or_default(), result: Ok(()) }
                })
                .collect();
            tier.backend.load_many(&mut reqs);
            let results: Vec<Result<(), TierError>> = reqs.into_iter().map(|r| r.result).collect();
            let others = self.tiers.iter().enumerate().any(|(k, x)| k != t && x.online.load(Ordering::SeqCst));
            batch
                .iter_mut()
                .zip(results)
                .map(|((lf, group), r)| {
                    if let Err(e) = r {
                        lf.set_error();
                        return DrainOutcome::Failed(e.into());
                    }
                    lf.set_uptodate();
                    let pages = lf.nr_pages() as u64;
                    match tier.kind {
                        TierKind::Pool => self.stats.add(Event::Zswpin, pages),
                        TierKind::File => self.stats.add(Event::Pswpin, pages),
                        _ => {}
                    }
                    if !others {
                        return DrainOutcome::Moved(Word::FREE, None);
                    }
                    let first = lf.swap().0;
                    let Some(data) = lf.data() else { return DrainOutcome::Moved(Word::FREE, None) };
                    match self.store_anywhere(*group, data, first, Some(t)) {
                        Ok((t2, st)) => DrainOutcome::Moved(Word::stored(0, t2 as u8, st.handle, 0), Some(t2)),
                        Err(SwapError::Tier(TierError::Reject)) | Err(SwapError::GroupLimit(_)) => {
                            DrainOutcome::Moved(Word::FREE, None)
                        }
                        Err(e) => DrainOutcome::Failed(e),
                    }
                })
                .collect()
        };
        // 3. Finish them all under one cluster lock.
        let mut after: Vec<DrainDone> = Vec::with_capacity(batch.len());
        if !batch.is_empty() {
            let mut g = match self.space.lock_cluster_index(c) {
                Ok(g) => Some(g),
                Err(e) => {
                    err.get_or_insert(e);
                    None
                }
            };
            for ((mut lf, group), out) in batch.into_iter().zip(outcomes) {
                let old = lf.backing();
                let pages = lf.nr_pages() as u64;
                let (old_dead, stored_in) = match out {
                    DrainOutcome::Moved(new, t2) => {
                        lf.set_backing(new);
                        moved += pages;
                        (Some(old), t2)
                    }
                    DrainOutcome::Failed(e) => {
                        err.get_or_insert(e);
                        (None, None)
                    }
                };
                let Some(g) = g.as_mut() else {
                    // Cannot happen (the index was valid a moment ago): finish it alone.
                    let r = self.finish(lf, RefBit::Keep, None);
                    if let Err(e) = r {
                        err.get_or_insert(e);
                    }
                    after.push(DrainDone { group, del: None, old_dead, pages, stored_in });
                    continue;
                };
                let r = stored_in.map_or(RefBit::Keep, |t2| self.ref_on_move_into(t2));
                let del = self.leave_cache_locked(g, &lf, r).unwrap_or_else(|e| {
                    err.get_or_insert(e);
                    None
                });
                let _ = lf.unlock();
                after.push(DrainDone { group, del, old_dead, pages, stored_in });
            }
        }
        // 4. Free what no word names any more, with no cluster lock held.
        for DrainDone { group, del, old_dead, pages, stored_in } in after {
            if let Some(d) = del {
                self.settle_deleted(d, pages);
            }
            if let Some(t2) = stored_in {
                self.tiers[t2].inflight.fetch_sub(1, Ordering::SeqCst);
            }
            if let Some(old) = old_dead {
                self.free_data(group, old, pages);
            }
        }
        // 5. Cached slots, one by one (rare: swap-ins in flight, or resident folios).
        for e in cached {
            match self.move_object(e, Dest::Drain(t), Busy::Wait) {
                Ok(Moved::Pages(p)) => {
                    moved += p;
                    found += 1;
                }
                Ok(_) | Err(SwapError::NotInUse(_)) => {}
                Err(e) => {
                    err.get_or_insert(e);
                }
            }
        }
        (moved, found, err)
    }

    /// Promotion (tiers both ways): move up to `max_pages` pages of objects of tier `from` (a
    /// file tier) that were swapped in since they got there (their REF bit: a refault, as the
    /// kernel's swap-cache hit / refault distance) back into tier `to` (the pool). Runs as an
    /// explicit or background pass, never on the fault path; objects being swapped in are
    /// skipped. Stops at the first object `to` rejects (full, or a group limit), counting it
    /// in `swp_promote_reject`; nothing is lost. Resumes where the previous call stopped.
    /// Counts `swp_promote`. Returns pages moved.
    pub fn promote(&self, from: usize, to: usize, max_pages: u64) -> Result<u64, SwapError> {
        self.scan_move(from, to, max_pages, &self.promote_cursor, &mut |_, w| Ok(w.referenced()), Event::SwpPromote)
    }

    /// Proactive writeback by age (the `memory.zswap.proactive_writeback` proposal): move up
    /// to `max_pages` pages of objects of tier `from` not stored or swapped in for at least
    /// `age` into tier `to`, whether or not `from` is full. Objects being swapped in are
    /// skipped; stops when `to` rejects (nothing lost). Resumes where the previous call
    /// stopped. Counts `zswpwb` and `zswpwb_proactive`. Returns pages moved.
    pub fn writeback_older_than(
        &self,
        from: usize,
        to: usize,
        age: Duration,
        max_pages: u64,
    ) -> Result<u64, SwapError> {
        let moved = self.scan_move(
            from,
            to,
            max_pages,
            &self.age_cursor,
            &mut |e, _| {
                let g = self.space.lock_cluster(e)?;
                let (s, m) = object_extent(&g, e.offset());
                let first = g.entry(s).0 as usize;
                drop(g);
                Ok(self.idle_for(first, 1 << m) >= age)
            },
            Event::ZswpwbProactive,
        )?;
        self.stats.add(Event::Zswpwb, moved);
        Ok(moved)
    }

    /// Move objects of tier `from` that `pick` selects into tier `to`, up to `max_pages`
    /// pages, from `cursor` on (wrapping once); counts `ev` per page moved.
    fn scan_move(
        &self,
        from: usize,
        to: usize,
        max_pages: u64,
        cursor: &AtomicU64,
        pick: &mut dyn FnMut(SwapEntry, Word) -> Result<bool, SwapError>,
        ev: Event,
    ) -> Result<u64, SwapError> {
        self.tier(from)?;
        self.tier(to)?;
        if from == to || max_pages == 0 {
            return Ok(0);
        }
        let mut moved = 0u64;
        let start = cursor.load(Ordering::Relaxed);
        let mut stopped_at = None;
        self.for_each_used(start, &mut |e, w| {
            if w.kind() != Kind::Stored || usize::from(w.tier()) != from || !pick(e, w)? {
                return Ok(true);
            }
            match self.move_object(e, Dest::Tier(to), Busy::Skip) {
                Ok(Moved::Pages(p)) => {
                    moved += p;
                    self.stats.add(ev, p);
                }
                Ok(_) | Err(SwapError::NotInUse(_)) => {}
                Err(SwapError::Tier(TierError::Reject)) | Err(SwapError::GroupLimit(_)) => {
                    if ev == Event::SwpPromote {
                        self.stats.add(Event::SwpPromoteReject, 1);
                    }
                    stopped_at = Some(e.0);
                    return Ok(false);
                }
                Err(err) => return Err(err),
            }
            if moved >= max_pages {
                stopped_at = Some(e.0 + 1);
                return Ok(false);
            }
            Ok(true)
        })?;
        cursor.store(stopped_at.unwrap_or(start) % self.nr_slots, Ordering::Relaxed);
        Ok(moved)
    }

    /// The relocate hook for tier `t` (see [`crate::backend::Relocate`]): the backend moved the
    /// object of `owner` from handle `old` to `new`. Takes the new handle (true) if the
    /// object's words still name `old`; refuses (false) otherwise, including while the object
    /// is in the swap cache, where a reader may be loading from `old`.
    pub(crate) fn relocate(&self, t: usize, owner: SwapEntry, old: u64, new: u64) -> bool {
        if new > PAYLOAD_MAX || t > usize::from(TIER_MAX) {
            return false;
        }
        let Ok(mut g) = self.space.lock_cluster(owner) else { return false };
        let off = owner.offset();
        let w = g.word(off);
        if w.kind() != Kind::Stored || usize::from(w.tier()) != t || w.payload() != old {
            return false;
        }
        let (s, m) = object_extent(&g, off);
        let loc = Word::stored(0, t as u8, new, 0);
        for i in s..s + (1 << m) {
            let w = g.word(i);
            if g.set(i, w.with_location_of(loc)).is_err() {
                return false;
            }
        }
        true
    }

    /// Compact tier `t`, rewriting the words of every object it moves. Returns bytes reclaimed.
    pub fn compact_tier(&self, t: usize) -> Result<u64, SwapError> {
        let tier = self.tier(t)?;
        Ok(tier.backend.compact(&mut |owner, old, new| self.relocate(t, owner, old, new)))
    }

    /// Recompress tier `t`'s objects idle since the last [`Engine::mark_idle_tier`] (or all,
    /// `idle_only` false) with its secondary algorithm, rewriting the words of every object it
    /// moves (see [`Backend::recompress`]). Not for the fault path: a background or explicit pass.
    pub fn recompress_tier(&self, t: usize, idle_only: bool) -> Result<crate::backend::Recompressed, SwapError> {
        let tier = self.tier(t)?;
        Ok(tier.backend.recompress(idle_only, &mut |owner, old, new| self.relocate(t, owner, old, new)))
    }

    /// One step of sharing storage with `fork` relatives, taken by every tier
    /// ([`Backend::fork_share`]; all are asked, no short circuit). False if some tier said
    /// false.
    pub fn fork_share(&self, step: crate::backend::ShareStep) -> bool {
        let ok = self.tiers.iter().filter(|t| !t.backend.fork_share(step)).count() == 0;
        if matches!(step, crate::backend::ShareStep::Child { .. }) {
            // The child's statistics start at the fork (the parent's stay with the parent).
            self.stats.reset();
            self.tiers.iter().for_each(|t| t.fails.reset());
        }
        ok
    }

    /// Mark everything in tier `t` idle (zram's `echo all > idle`, see [`Backend::mark_idle`]).
    pub fn mark_idle_tier(&self, t: usize) -> Result<(), SwapError> {
        self.tier(t)?.backend.mark_idle();
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn order_of_len_accepts_only_folio_sizes() {
        assert_eq!(order_of_len(4096), Ok(0));
        assert_eq!(order_of_len(4096 << 9), Ok(9));
        assert!(order_of_len(0).is_err());
        assert!(order_of_len(4095).is_err());
        assert!(order_of_len(3 * 4096).is_err());
        assert!(order_of_len(4096 << 10).is_err());
    }

    #[test]
    fn zero_check() {
        let mut v = vec![0u8; 4096 + 3];
        assert!(is_zero(&v));
        v[4098] = 1;
        assert!(!is_zero(&v));
        v[4098] = 0;
        v[17] = 0x80;
        assert!(!is_zero(&v));
    }
}
