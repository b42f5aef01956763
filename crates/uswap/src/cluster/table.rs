//! A cluster's table (the kernel's `mm/swap_table.h` table lifetime): the lock-free read of a
//! word, the table allocated when the cluster gets its first used slot and retired through
//! `crossbeam-epoch` when its last slot is freed, and the tables freed with the space.
//!
//! Locking: a read takes no lock (an epoch pin, the table pointer with Acquire, the word); a
//! table is published and unpublished only under its cluster lock. Under loom, retired tables
//! wait in `SwapSpace::retired` (a lock of its own, a leaf) until the space drops.

use super::SwapSpace;
use crate::swap_table::{SwapEntry, SwapTable, Word};
#[cfg(loom)]
use crate::sync::lock;
use crate::sync::Ordering;
use crate::SwapError;

impl SwapSpace {
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

    /// The first cluster at or after `from` that has used slots (a live table), for scanners
    /// (writeback, drain, compaction). Lock-free; the answer may be stale by the time the
    /// caller locks the cluster.
    pub fn next_used_cluster(&self, from: usize) -> Option<usize> {
        (from..self.clusters.ready())
            .find(|&i| self.clusters.get(i).is_some_and(|c| !c.table.load(Ordering::Acquire).is_null()))
    }

    /// The cluster's table, allocating it if the cluster has none. Cluster lock held.
    pub(super) fn ensure_table(&self, ci: usize) -> &SwapTable {
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
    pub(super) fn retire_table(&self, ci: usize) {
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
