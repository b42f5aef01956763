//! The cluster lock as a guard ([`ClusterGuard`]): every change of a word, of a swap count
//! (inline, or in the cluster's extend table) and every free of slots goes through one.
//!
//! Locking: a guard is the cluster lock (`Cluster::state`), taken by
//! [`SwapSpace::lock_cluster`] and [`SwapSpace::lock_cluster_index`]. Dropped after slots were
//! freed, it relocates the cluster on the lists (the list lock taken inside). It must not be
//! held while calling [`SwapSpace::alloc`] from the same thread (alloc may try to lock that
//! cluster), and a thread holds at most one guard of a space at a time (cluster locks have no
//! order among themselves).

use super::lock::ClusterLockGuard;
use super::state::{bit, set_bits, ClusterState, N};
use super::SwapSpace;
use crate::swap_table::{SwapEntry, SwapTable, Word, COUNT_MAX};
use crate::sync::Ordering;
use crate::SwapError;

impl SwapSpace {
    /// Lock the cluster holding `e`.
    pub fn lock_cluster(&self, e: SwapEntry) -> Result<ClusterGuard<'_>, SwapError> {
        self.check_entry(e)?;
        let idx = e.cluster();
        Ok(ClusterGuard { space: self, idx, st: self.cluster(idx).state.lock(), dirty: false })
    }

    /// Lock cluster `idx` by index (for scanners using [`SwapSpace::next_used_cluster`]).
    pub fn lock_cluster_index(&self, idx: usize) -> Result<ClusterGuard<'_>, SwapError> {
        if idx >= self.clusters.len() {
            return Err(SwapError::OutOfRange((idx as u64).saturating_mul(N as u64)));
        }
        Ok(ClusterGuard { space: self, idx, st: self.cluster(idx).state.lock(), dirty: false })
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
