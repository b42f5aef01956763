//! The tier side of an object: storing its data in a tier (the group's limits, the pool cap,
//! the fallback to the next tier when one fails) and freeing it there, with the group's charge.
//!
//! # Charging
//! Every word records its group. A group is charged `swapped_pages` for every slot in use
//! (at swap-out, uncharged when the slots are freed), `pool_bytes` for data in RAM tiers (pool
//! and memory kinds) and `swap_pages` only while data is on a [`TierKind::File`] tier (charged
//! here at store or writeback time, uncharged here when the data leaves the tier).
//!
//! Locking: a store takes no engine lock (the backend's `store` runs with no lock held); a
//! tier's in-flight count is raised before the store and lowered by the caller once the words
//! name the data, so that a drain waits for stores that chose the tier before it went offline.
//! [`Engine::free_data`] may run under a cluster lock (cluster lock -> backend internal locks).

use super::Engine;
use crate::backend::{Stored, TierKind};
use crate::error::{SwapError, TierError};
use crate::fails::FailKind;
use crate::stats::Event;
use crate::swap_table::{Kind, SwapEntry, Word, PAGE_SIZE, PAYLOAD_MAX};
use crate::sync::Ordering;

/// Whether a store into a RAM tier may pass the group's pool cap.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(super) enum Cap {
    /// The cap holds: over it, the page goes to the next tier.
    Keep,
    /// Past the cap: every tier outside RAM failed or was full for this page, and a pool a
    /// little larger than its share is better than a page that cannot leave memory (the pool
    /// is still charged to the limit, so the resident set shrinks to make room).
    Pass,
}

impl Engine {
    /// Free an object's data in its tier and uncharge its group.
    pub(super) fn free_data(&self, group: u16, loc: Word, pages: u64) {
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
    /// once the words point at the data. A failure is counted in the tier's [`TierFails`](crate::fails::TierFails): an
    /// error that is one, or a rejection by a tier outside RAM (no free slot left).
    pub(super) fn store_in(
        &self,
        t: usize,
        group: u16,
        data: &[u8],
        owner: SwapEntry,
        cap: Cap,
    ) -> Result<Stored, SwapError> {
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
    pub(super) fn store_anywhere(
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
}
