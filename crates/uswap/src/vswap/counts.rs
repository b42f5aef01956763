//! Swap counts: [`Engine::dup`] and [`Engine::put`] (freeing each object whose counts all
//! reach 0, with its backend data), and [`Engine::count`].
//!
//! Locking: each call holds the cluster lock of its range for the whole call. Under it `put`
//! frees backend data (cluster lock -> backend internal locks) and takes an unlocked cached
//! folio whose counts reached 0 out of the cache (`SwapCache::delete_locked`, whose locks are
//! leaves).

use super::Engine;
use crate::error::SwapError;
use crate::swap_cache::{location, object_extent, RefBit, FOLIO_INFLIGHT};
use crate::swap_table::{Kind, SwapEntry};

impl Engine {
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
}
