//! The online drain ("swapoff") of a tier: every object it holds moves to another tier or into
//! memory while swap-ins go on, cluster by cluster, in batches, on several threads.
//!
//! Locking: the drain takes the tier offline, then waits for the stores that chose it before
//! (the tier's in-flight count). The batched drain holds one cluster lock to take all of a
//! cluster's objects into the cache (their folios LOCKED, so swap-ins wait on them as on any
//! mover), loads and stores with no lock held, then holds it once more to finish them all;
//! backend frees come after, with no cluster lock held. Its worker threads (scoped) never hold
//! two cluster locks. No lock class of its own.

use super::mover::{Busy, Dest, Moved};
use super::Engine;
use crate::backend::{LoadReq, TierKind};
use crate::error::{SwapError, TierError};
use crate::stats::Event;
use crate::swap_cache::{object_extent, AddMode, Deleted, LockedFolio, Lookup, RefBit, FOLIO_INFLIGHT};
use crate::swap_table::{Kind, SwapEntry, Word, SLOTS_PER_CLUSTER};
use crate::sync::Ordering;
use std::sync::atomic::AtomicUsize as StdAtomicUsize;

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

impl Engine {
    /// Threads [`Engine::drain_tier`] uses, the caller's included (default: the CPUs, at most
    /// 4; 1 = no extra thread).
    pub fn set_drain_threads(&self, n: usize) {
        self.drain_threads.store(n.max(1), std::sync::atomic::Ordering::Relaxed);
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
    /// [`Backend::load_many`](crate::backend::Backend::load_many) (the file tier reads each
    /// run of adjacent slots with one read), stores them elsewhere if another tier takes them,
    /// and finishes them all under one cluster lock. An object whose load or store fails stays
    /// where it was; the drain goes on with the others and returns the first error (the tier
    /// stays offline, partly drained).
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
                    LoadReq { handle, out: lf.data_mut().unwrap_or_default(), optional: false, result: Ok(()) }
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
}
