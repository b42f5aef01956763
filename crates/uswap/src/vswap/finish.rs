//! Finishing a swap-cache folio: its owner (the thread that added it to the cache) drops it
//! from the cache, restoring its (possibly new) backing word, or frees the slots if every count
//! reached 0, or keeps it as the only copy (drain into memory); then frees what no word names
//! any more.
//!
//! Locking: the owner finishes a folio under its cluster lock: it puts back the backing word,
//! or frees the slots, or keeps the folio and unlocks it while still holding the cluster lock.
//! What that leaves unnamed (dead backend data, the charge of freed slots) is freed once the
//! cluster lock is dropped ([`Engine::settle_deleted`]).

use super::Engine;
use crate::backend::TierKind;
use crate::cluster::ClusterGuard;
use crate::error::SwapError;
use crate::swap_cache::{Deleted, LockedFolio, RefBit};
use crate::swap_table::SwapEntry;

impl Engine {
    /// Finish a folio this thread owns, under its cluster lock: optionally drop one count
    /// on each slot of `put` first (all or none; returns whether it did), then take the folio
    /// out of the cache (restoring its backing, or freeing the slots if no count is left),
    /// or keep it as the only copy if it has no backing and counts remain. Unlocks the folio
    /// in every case.
    pub(super) fn finish(
        &self,
        lf: LockedFolio<'_>,
        r: RefBit,
        put: Option<(SwapEntry, usize)>,
    ) -> Result<bool, SwapError> {
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
    pub(super) fn leave_cache_locked(
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
    pub(super) fn settle_deleted(&self, d: Deleted, pages: u64) {
        if let Some(dead) = d.dead_backing {
            self.free_data(d.group, dead, pages);
        }
        if d.freed_slots > 0 {
            self.groups.sub_swapped(d.group, d.freed_slots as u64);
        }
    }

    /// How REF ends up when an object moves into tier `t`: cleared on a file tier (there it
    /// means "refaulted since it got here", for promotion), as it was elsewhere.
    pub(super) fn ref_on_move_into(&self, t: usize) -> RefBit {
        if self.tiers[t].kind == TierKind::File {
            RefBit::Clear
        } else {
            RefBit::Keep
        }
    }
}
