//! Region release: giving back what a region's pages hold. [`release_pages`] frees the swap
//! entries and swap-cache copies of a range and makes it zero-fill (for an unmap, a
//! `MADV_DONTNEED` or a region's end); a region is retired ([`retire_region`]) by taking it
//! out of the registry, waiting until no thread is inside it, and releasing all its pages. In
//! a fork child, [`forget_clean`] gives up the swap entries clean pages kept. After the
//! kernel's `free_swap_and_cache` in `mm/swapfile.c`.
//!
//! Of the pager: the uffd, the store, the swap cache, the active list (`lru`) and the resident page
//! count (`charge`).
//!
//! Locking: pages are claimed by CAS (a page another thread holds `BUSY` is waited for by
//! yielding, or passed over with `skip_busy`). Retiring a region waits for every thread
//! inside the registry ([`region::enter`]), so it is called with no lock held that such a
//! thread may wait for.

use crate::page::{kind, PageWord};
use crate::region::{self, RegionInner};
use crate::{Pager, PAGE_SIZE};
use std::sync::atomic::Ordering;

use super::lru::entry;
use super::swap::{clean_tags, clear_clean_tags, store_failed, store_folio};

/// Take a region out of the registry and free it ([`region::retire_region`]), releasing its
/// swap entries and cache copies first.
///
/// # Safety
/// - As for [`region::retire_region`].
pub(crate) unsafe fn retire_region(inner: *mut RegionInner) {
    // SAFETY: the caller's obligations are retire_region's.
    unsafe { region::retire_region(inner, |r| release_pages(r, 0, r.npages, false)) }
}

/// Free an unpublished region ([`region::free_unpublished`]), releasing its swap entries and
/// cache copies first.
///
/// # Safety
/// - As for [`region::free_unpublished`].
pub(crate) unsafe fn free_unpublished(inner: *mut RegionInner) {
    // SAFETY: the caller's obligations are free_unpublished's.
    unsafe { region::free_unpublished(inner, |r| release_pages(r, 0, r.npages, false)) }
}

/// Release pages `[a, b)` of `r`: free their swap entries and cache copies and make them
/// zero-fill. `live` = the mapping stays (drop the resident pages with `MADV_DONTNEED` too);
/// otherwise the memory is going away (unmap, region drop).
pub(crate) fn release_pages(r: &RegionInner, a: usize, b: usize, live: bool) {
    release_pages_ex(r, a, b, live, false)
}

/// [`release_pages`]; with `skip_busy`, pages another thread holds are left alone instead of
/// waited for (the madvise events of the pager's own evictions).
pub(crate) fn release_pages_ex(r: &RegionInner, a: usize, b: usize, live: bool, skip_busy: bool) {
    let p = r.pager();
    let b = b.min(r.npages);
    let mut pg = a;
    let mut resident = 0i64;
    while pg < b {
        let w = r.word(pg).load(Ordering::Acquire);
        match w.kind() {
            kind::NONE => pg += 1,
            kind::BUSY if skip_busy => pg += 1,
            kind::BUSY => std::thread::yield_now(),
            kind::RESIDENT => {
                if r.word(pg).compare_exchange(w, PageWord::NONE, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                    resident += 1;
                    pg += 1;
                }
            }
            kind::SWAPPED => {
                if r.word(pg).compare_exchange(w, PageWord::NONE, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                    p.store.put(w.payload(), 1);
                    pg += 1;
                }
            }
            kind::CLEAN => {
                if r.word(pg).compare_exchange(w, PageWord::NONE, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                    p.store.put(w.clean_entry(), 1);
                    resident += 1;
                    pg += 1;
                }
            }
            kind::CACHED => {
                let order = w.order();
                let n = 1usize << order;
                let head = pg & !(n - 1);
                let mut got = 0;
                while got < n
                    && r.word(head + got)
                        .compare_exchange(w, PageWord::BUSY, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    got += 1;
                }
                if got < n {
                    for i in 0..got {
                        r.word(head + i).store(w, Ordering::Release);
                    }
                    if skip_busy {
                        pg += 1;
                    } else {
                        std::thread::yield_now();
                    }
                    continue;
                }
                let o = region::cached_obj(w, order);
                let mut kept = [PageWord::NONE; 512];
                clean_tags(p, o, n, &mut kept);
                clear_clean_tags(p, o, n);
                for i in 0..n {
                    let q = head + i;
                    if q >= a && q < b {
                        if kept[i] != PageWord::NONE {
                            p.store.put(kept[i].payload(), 1);
                        }
                        r.word(q).store(PageWord::NONE, Ordering::Release);
                        continue;
                    }
                    if kept[i] != PageWord::NONE {
                        // Outside the range, a clean page: its entry still holds it.
                        r.word(q).store(kept[i], Ordering::Release);
                        continue;
                    }
                    // Outside the range: keep the data, as a 4 KiB page in the store.
                    // SAFETY: page i of the claimed cache object.
                    let d = unsafe { std::slice::from_raw_parts(p.cache.ptr(o).add(i * PAGE_SIZE), PAGE_SIZE) };
                    let mut nw = [PageWord::NONE; 1];
                    if store_folio(p, d, 0, &mut nw).is_ok() {
                        r.word(q).store(nw[0], Ordering::Release);
                    } else {
                        // Cannot keep it out of memory: map it back.
                        store_failed(p);
                        // SAFETY: the cache page is readable; q is claimed and missing.
                        let _ = unsafe { p.uffd.copy(r.addr(q), d.as_ptr(), PAGE_SIZE, false, true) };
                        r.word(q).store(PageWord::resident(0), Ordering::Release);
                        p.charge.resident_pages.fetch_add(1, Ordering::AcqRel);
                        p.lru.active.push(entry(r, q, 0));
                    }
                }
                p.cache.free(o);
                pg = head + n;
            }
            _ => pg += 1,
        }
    }
    p.charge.resident_pages.fetch_sub(resident, Ordering::AcqRel);
    if live && b > a {
        // SAFETY: advice on the region's own memory.
        unsafe { libc::madvise(r.addr(a) as *mut _, (b - a) * PAGE_SIZE, libc::MADV_DONTNEED) };
    }
}

/// In a fork child: make every CLEAN page of the pager's regions RESIDENT and writable. The
/// child's registration is new, so whether the write protection survived is not ours to rely
/// on; a clean page written unseen would be evicted with its stale entry. Call before the
/// child runs program code.
///
/// # Safety
/// - The calling thread is between [`region::enter`] and [`region::leave`].
pub(crate) unsafe fn forget_clean(p: &Pager) {
    let visit = |r: &'static RegionInner| {
        if !r.had_clean.load(Ordering::Relaxed) {
            return;
        }
        for pg in 0..r.npages {
            let w = r.word(pg).load(Ordering::Acquire);
            if w.kind() == kind::CLEAN {
                let _ = p.uffd.writeprotect(r.addr(pg), PAGE_SIZE, false, false);
                p.store.put(w.clean_entry(), 1);
                r.word(pg).store(PageWord::resident(w.order()), Ordering::Release);
            }
        }
    };
    // SAFETY: the caller is between enter and leave (this function's contract); the references
    // are not kept.
    unsafe { region::for_each_of(p, visit) };
}
