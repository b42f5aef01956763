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
//! - Slots being stored by `swap_out` hold a placeholder CACHED word ([`FOLIO_INFLIGHT`]); a
//!   per-tier in-flight counter lets `drain_tier` wait for stores that chose the tier before
//!   it went offline.
//! - Lock order: cluster lock -> backend internal locks (only `Backend::free` runs under a
//!   cluster lock); swap-cache locks are leaves. Backend `store`/`load` run with no lock held.
//!
//! # Charging
//! Every word records its group. A group is charged `swapped_pages` for every slot in use,
//! `pool_bytes` for data in RAM tiers (pool and memory kinds) and `swap_pages` only while data
//! is on a [`TierKind::File`] tier (charged at store or writeback time, uncharged when the
//! data leaves the tier).

use crate::backend::{Backend, Stored, TierKind, Usage};
use crate::cluster::{FragPolicy, SpaceConfig, SwapSpace};
use crate::error::{SwapError, TierError};
use crate::group::Groups;
use crate::stats::{Event, OrderEvent, Stats};
use crate::swap_cache::{location, object_extent, AddMode, LockedFolio, Lookup, SwapCache, FOLIO_INFLIGHT};
use crate::swap_table::{Kind, SwapEntry, Word, MAX_ORDER, PAGE_SIZE, PAYLOAD_MAX, SLOTS_PER_CLUSTER, TIER_MAX};
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

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
                })
                .collect(),
            groups: Groups::new(cfg.nr_groups)?,
            stats: Stats::default(),
            zero_elision: cfg.zero_elision,
            nr_slots,
            wb_cursor: AtomicU64::new(0),
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

    /// Store `data` in tier `t` (checking the group's limits and charging it). On success
    /// the tier's in-flight count is raised; the caller lowers it once the words point at
    /// the data.
    fn store_in(&self, t: usize, group: u16, data: &[u8], owner: SwapEntry) -> Result<Stored, SwapError> {
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
                if !self.groups.may_pool(group) {
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
                Err(e.into())
            }
        }
    }

    /// Store `data` in the first online tier (other than `skip`) that does not reject it.
    fn store_anywhere(
        &self,
        group: u16,
        data: &[u8],
        owner: SwapEntry,
        skip: Option<usize>,
    ) -> Result<(usize, Stored), SwapError> {
        let mut limited = false;
        for t in 0..self.tiers.len() {
            if Some(t) == skip || !self.tiers[t].online.load(Ordering::SeqCst) {
                continue;
            }
            match self.store_in(t, group, data, owner) {
                Ok(s) => return Ok((t, s)),
                Err(SwapError::GroupLimit(_)) => limited = true,
                Err(SwapError::Tier(TierError::Reject)) => {}
                Err(e) => return Err(e),
            }
        }
        Err(if limited { SwapError::GroupLimit(group) } else { SwapError::Tier(TierError::Reject) })
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
                let res = self.space.lock_cluster(e).and_then(|mut g| {
                    for i in off..off + n {
                        let w = g.word(i);
                        g.set(i, w.with_location_of(loc).with_referenced(true))?;
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
    fn finish(&self, lf: LockedFolio<'_>, set_ref: bool, put: Option<(SwapEntry, usize)>) -> Result<bool, SwapError> {
        let (first, order) = lf.swap();
        let n = 1usize << order;
        let start = first.offset();
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
        let all_zero = (start..start + n).all(|i| g.count(i) == 0);
        let res = if lf.backing().is_free() && !all_zero {
            Ok(None)
        } else {
            self.cache.delete_locked(&mut g, &lf, set_ref).map(Some)
        };
        let _ = lf.unlock();
        drop(g);
        if let Some(d) = res? {
            if let Some(dead) = d.dead_backing {
                self.free_data(d.group, dead, n as u64);
            }
            if d.freed_slots > 0 {
                self.groups.sub_swapped(d.group, d.freed_slots as u64);
            }
        }
        Ok(put_done)
    }

    /// Load a folio just added to the cache from its backing.
    fn fill(&self, lf: &mut LockedFolio<'_>) -> Result<(), SwapError> {
        let b = lf.backing();
        let tier = self.tier(usize::from(b.tier()))?;
        let buf = lf.data_mut().ok_or_else(|| SwapError::Config("filling an uptodate folio".into()))?;
        let pages = (buf.len() / PAGE_SIZE) as u64;
        tier.backend.load(b.payload(), buf)?;
        match tier.kind {
            TierKind::Pool => self.stats.add(Event::Zswpin, pages),
            TierKind::File => self.stats.add(Event::Pswpin, pages),
            _ => {}
        }
        lf.set_uptodate();
        Ok(())
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
        tier.backend.load_part(b.payload(), buf, at, out.len())?;
        match tier.kind {
            TierKind::Pool => self.stats.add(Event::Zswpin, (out.len() / PAGE_SIZE) as u64),
            TierKind::File => self.stats.add(Event::Pswpin, (out.len() / PAGE_SIZE) as u64),
            _ => {}
        }
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
                        self.finish(lf, false, None)?;
                        res?;
                        self.stats.add_order(OrderEvent::Swpin, order, 1);
                        return Ok(false);
                    }
                    if let Err(e) = self.fill(&mut lf) {
                        lf.set_error();
                        self.finish(lf, false, None)?;
                        return Err(e);
                    }
                    let first = lf.swap().0;
                    if let Some(d) = lf.data() {
                        Self::copy_out(first, d, entry, out);
                    }
                    self.stats.add_order(OrderEvent::Swpin, order, 1);
                    let put = free.then_some((entry, 1usize << order));
                    return self.finish(lf, !free, put);
                }
                Lookup::Locked(lf) => {
                    // Not asked for; give it back.
                    let _ = lf.unlock();
                }
            }
        }
    }

    /// Preallocate swap-cache folios for swap-ins of up to `max_order` (see
    /// [`SwapCache::reserve`]), so a swap-in from a signal handler does not call malloc.
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
                        let d = self.cache.delete_locked(&mut g, &f, false)?;
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
                        self.finish(lf, false, None)?;
                        return Ok(Moved::NotNeeded);
                    }
                    if let Err(e) = self.fill(&mut lf) {
                        lf.set_error();
                        self.finish(lf, false, None)?;
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
            self.finish(lf, false, None)?;
            return Ok(Moved::NotNeeded);
        }
        let (first, order) = lf.swap();
        let pages = 1u64 << order;
        let group = match self.space.load(first) {
            Ok(w) => w.group(),
            Err(e) => {
                self.finish(lf, false, None)?;
                return Err(e);
            }
        };
        let stored = {
            let Some(data) = lf.data() else {
                self.finish(lf, false, None)?;
                return Err(SwapError::Config("moving a folio that is not uptodate".into()));
            };
            match dest {
                Dest::Tier(t) => self.store_in(t, group, data, first).map(|s| (t, s)),
                Dest::Drain(from) => self.store_anywhere(group, data, first, Some(from)),
            }
        };
        match stored {
            Ok((t, s)) => {
                lf.set_backing(Word::stored(0, t as u8, s.handle, 0));
                let r = self.finish(lf, false, None);
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
                self.finish(lf, false, None)?;
                self.free_data(group, old, pages);
                Ok(Moved::Pages(pages))
            }
            Err(e) => {
                self.finish(lf, false, None)?;
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
        self.tier(from)?;
        self.tier(to)?;
        if from == to || max_pages == 0 {
            return Ok(0);
        }
        let mut moved = 0u64;
        for _pass in 0..2 {
            let start = self.wb_cursor.load(Ordering::Relaxed);
            let mut stopped_at = None;
            self.for_each_used(start, &mut |e, w| {
                if w.kind() != Kind::Stored || usize::from(w.tier()) != from {
                    return Ok(true);
                }
                if w.referenced() {
                    self.clear_ref(e, w)?;
                    return Ok(true);
                }
                match self.move_object(e, Dest::Tier(to), Busy::Skip) {
                    Ok(Moved::Pages(p)) => {
                        moved += p;
                        self.stats.add(Event::Zswpwb, p);
                    }
                    Ok(_) | Err(SwapError::NotInUse(_)) => {}
                    // The target is full or over a group limit: writeback stops; nothing lost.
                    Err(SwapError::Tier(TierError::Reject)) | Err(SwapError::GroupLimit(_)) => {
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
            if let Some(s) = stopped_at {
                self.wb_cursor.store(s % self.nr_slots, Ordering::Relaxed);
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
    /// may run concurrently and get correct data. The tier stays offline. Returns pages moved.
    pub fn drain_tier(&self, t: usize) -> Result<u64, SwapError> {
        let tier = self.tier(t)?;
        tier.online.store(false, Ordering::SeqCst);
        while tier.inflight.load(Ordering::SeqCst) != 0 {
            #[cfg(loom)]
            loom::thread::yield_now();
            #[cfg(not(loom))]
            std::thread::yield_now();
        }
        let mut moved = 0u64;
        loop {
            let mut found = 0u64;
            self.for_each_used(0, &mut |e, w| {
                // A cached folio hides its backing: if that backing is in tier `t`, the folio
                // would put it back when it leaves the cache, so cached slots are moved too
                // (move_object checks the backing and does nothing for other tiers).
                let cached = w.kind() == Kind::Cached;
                if cached || (w.kind() == Kind::Stored && usize::from(w.tier()) == t) {
                    match self.move_object(e, Dest::Drain(t), Busy::Wait) {
                        Ok(Moved::Pages(p)) => {
                            moved += p;
                            found += 1;
                        }
                        Ok(_) if !cached => found += 1,
                        Ok(_) => {}
                        // Freed since the scan saw it.
                        Err(SwapError::NotInUse(_)) => {}
                        Err(err) => return Err(err),
                    }
                }
                Ok(true)
            })?;
            if found == 0 {
                return Ok(moved);
            }
        }
    }

    /// The relocate hook for tier `t` (see [`crate::backend::Relocate`]): the backend moved the
    /// object of `owner` from handle `old` to `new`. Takes the new handle (true) if the
    /// object's words still name `old`; refuses (false) otherwise, including while the object
    /// is in the swap cache, where a reader may be loading from `old`.
    pub fn relocate(&self, t: usize, owner: SwapEntry, old: u64, new: u64) -> bool {
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
