//! The [`Region`] handle: memory the program maps through [`Pager::map`], with its accessors,
//! explicit eviction and discard, and its retirement when dropped.
//!
//! The handle sits above reclaim (dropping a region releases its swap entries and cache
//! copies, [`Region::evict_all`] evicts): the page words and the registry it names are in
//! [`region`], below.
//!
//! Locking: none of its own. Eviction and discard run between [`region::enter`] and
//! [`region::leave`] and take pages by CAS to `BUSY` like every other path; `Drop` waits for
//! pending events ([`Pager::sync_events`]) and retires the region, which waits until no thread
//! is inside the registry.

use crate::page::kind;
use crate::region::{self, RegionInner};
use crate::{reclaim, Pager, PagerError, PAGE_SIZE};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A managed region of anonymous memory, paged by its [`Pager`] under the pager's limit.
///
/// Use it as ordinary memory through [`Region::as_ptr`] or [`Region::as_mut_slice`]; pages are
/// swapped out when the pager is over its limit and swapped back in on access. Dropping the
/// region unmaps it and frees its swap entries.
pub struct Region {
    inner: *mut RegionInner,
    pager: Arc<Pager>,
}

// SAFETY: the region's memory and state are shared-safe (atomics); the raw pointer is owned.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    pub(crate) fn create(pager: &Arc<Pager>, len: usize) -> Result<Region, PagerError> {
        let inner = region::create_mapped(pager, len)?;
        Ok(Region { inner, pager: pager.clone() })
    }

    fn inner(&self) -> &RegionInner {
        // SAFETY: inner lives until Drop.
        unsafe { &*self.inner }
    }

    /// First byte of the region.
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner().start as *mut u8
    }

    /// Length in bytes (the requested length rounded up to the folio size).
    pub fn len(&self) -> usize {
        self.inner().len
    }

    /// True if the region has no bytes (never: a region is at least one folio).
    pub fn is_empty(&self) -> bool {
        self.inner().len == 0
    }

    /// The region as a byte slice.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is valid for len bytes for the region's life; faults are served.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len()) }
    }

    /// The region as a mutable byte slice.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as as_slice, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr(), self.len()) }
    }

    /// The pager serving this region.
    pub fn pager(&self) -> &Arc<Pager> {
        &self.pager
    }

    /// Mark the region for large-folio swap-in under the `Madvise` swap-in policy (like
    /// `madvise(MADV_HUGEPAGE)` for the kernel's `swapin_enabled=madvise`).
    pub fn advise_hugepage(&self, on: bool) {
        self.inner().huge_hint.store(on, Ordering::Relaxed);
    }

    /// Count pages of the region per state: (none, resident, busy, cached, swapped); clean
    /// pages (resident with their swap entry kept) count as resident.
    pub fn page_states(&self) -> [usize; 5] {
        let r = self.inner();
        let mut c = [0usize; 5];
        for i in 0..r.npages {
            let k = r.word(i).load(Ordering::Relaxed).kind();
            c[match k {
                kind::CLEAN => 1,
                kind::UNMAPPED => 0,
                k => k.min(4) as usize,
            }] += 1;
        }
        c
    }

    /// Pages of the region mapped clean (write-protected, swap entry kept).
    pub fn clean_pages(&self) -> usize {
        let r = self.inner();
        (0..r.npages).filter(|&i| r.word(i).load(Ordering::Relaxed).kind() == kind::CLEAN).count()
    }

    /// Evict every resident and cached page of the region now (for tests and for callers that
    /// know the region goes cold). Returns the pages evicted.
    pub fn evict_all(&self) -> usize {
        let _signals = crate::sys::SignalsBlocked::new();
        region::enter();
        // SAFETY: inner lives until Drop, which waits for threads inside enter()/leave().
        let r: &'static RegionInner = unsafe { &*self.inner };
        let n = reclaim::evict_region(r);
        region::leave();
        n
    }

    /// Release `[offset, offset+len)` of the region: its pages become zero-fill and their swap
    /// entries are freed (what `madvise(MADV_DONTNEED)` does to anonymous memory).
    pub fn discard(&self, offset: usize, len: usize) {
        let r = self.inner();
        let a = offset.min(r.len) / PAGE_SIZE;
        let b = (offset.saturating_add(len)).min(r.len).div_ceil(PAGE_SIZE);
        let _signals = crate::sys::SignalsBlocked::new();
        region::enter();
        reclaim::release_pages(r, a, b, true);
        region::leave();
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // The program's munmaps of region memory returned once their events were read; wait
        // until they are processed too, so the pages they unmapped are marked UNMAPPED (the
        // event thread finds the region through the registry, so before it is retired).
        self.pager.sync_events();
        let _signals = crate::sys::SignalsBlocked::new();
        // SAFETY: created by create_mapped, retired once (here); we are not inside enter().
        unsafe { reclaim::retire_region(self.inner) };
    }
}
