//! Passes between tiers over the whole virtual space: second-chance writeback, writeback by
//! age, and promotion.
//!
//! # Tiers both ways
//! Down: [`Engine::writeback`] (second chance, when the pool is full) and
//! [`Engine::writeback_older_than`] (proactive, by age). Up: [`Engine::promote`] moves
//! file-tier objects swapped in since they got there (their REF bit) back into the pool. All are
//! explicit passes; the fault path only sets REF and the age stamp.
//!
//! Locking: a pass reads words lock-free to pick objects, takes a cluster lock briefly to
//! clear a REF bit or read an object's extent, and moves each object as `mover.rs` does.

use super::mover::{Busy, Dest, Moved};
use super::Engine;
use crate::error::{SwapError, TierError};
use crate::stats::Event;
use crate::swap_cache::{location, object_extent};
use crate::swap_table::{Kind, SwapEntry, Word, SLOTS_PER_CLUSTER};
use crate::sync::{AtomicU64, Ordering};
use std::time::Duration;

impl Engine {
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
                Ok(self.stamps.idle_for(first, 1 << m) >= age)
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
}
