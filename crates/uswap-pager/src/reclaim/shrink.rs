//! The reclaim step: what one pass of reclaim takes from which list, and the callers that
//! run it. [`reclaim_batch`] sizes a batch, balances the protected list, and then shrinks the
//! inactive list (compressing the oldest swap-cache folios into the store) and the active
//! list (evicting through [`evict_resident`], to the swap cache with the two-list policy,
//! straight to the store with FIFO or while the workingset bypasses the inactive stage).
//! [`direct_reclaim`] runs it on the faulting thread until a folio fits; [`evict_region`]
//! takes a whole region out to the store. After the kernel's `shrink_lruvec` and
//! `reclaim_pages` in `mm/vmscan.c`.
//!
//! Of the pager: its lists and workingset (`lru`), configuration, limit, resident page count
//! (`charge`), swap cache, counters, store, and the copy-on-write preference (`cow_shared`,
//! `pagemap`).
//!
//! Locking: pages are claimed by CAS to `BUSY` (see [`crate::region`]); the caller is inside
//! [`region::enter`]/[`region::leave`]. Shrinking the inactive list and evicting a region's
//! cached folios take a bounce buffer from the pager's pool for their words (not the stack:
//! direct reclaim may run in a SIGBUS handler on the program's stack). [`IN_RECLAIM`] counts
//! this thread's depth of reclaim, which a fault taken inside it reads.

use crate::page::{kind, PageWord};
use crate::region::{self, RegionInner};
use crate::stats::inc;
use crate::{Pager, Replacement, PAGE_SIZE};
use std::sync::atomic::Ordering;

use super::batch::{IN_RECLAIM, MAX_BATCH_PAGES};
use super::evict::evict_resident;
use super::lru::decode;
use super::swap::{keep_or_forget_clean, store_failed, store_folio};

/// One reclaim step. Returns true if it made progress.
pub(crate) fn reclaim_batch(p: &Pager) -> bool {
    IN_RECLAIM.with(|c| c.set(c.get() + 1));
    inc(&p.counters.reclaim_batches, 1);
    // At most 1/64 of the limit per batch (kernel: SWAP_CLUSTER_MAX against the LRU size), so
    // a small limit is not emptied by one batch.
    let limit_pages = (p.limit() / PAGE_SIZE as u64) as usize;
    let batch = p.cfg.reclaim_batch.min(limit_pages / 64).clamp(16, MAX_BATCH_PAGES);
    let lru = &p.lru;
    let two = p.cfg.replacement == Replacement::TwoList;
    let target = p.limit() * u64::from(p.cfg.inactive_percent) / 100;
    if two {
        lru.balance_protected(&p.counters, p.charge.resident_pages.load(Ordering::Relaxed).max(0) as u64, batch);
    }
    // While pages are shared with a fork relative, pass over up to four batches' worth of
    // folios it maps too (see `Pager::set_cow_shared`) before taking such folios anyway.
    let pagemap = if p.cow_shared.load(Ordering::Relaxed) {
        p.pagemap.get(|_| crate::sys::open_raw(c"/proc/self/pagemap"))
    } else {
        None
    };
    let mut skips = 4 * batch;
    let mut pinned_skips = 64;
    let mut next = || loop {
        // Everything mapped is protected (a hot working set that fits the resident pages and
        // keeps coming back): take from it rather than evict nothing.
        let e = lru.active.pop().or_else(|| lru.protected.pop())?;
        let (slot, gen, page, order) = decode(e);
        // SAFETY: as in shrink_inactive: inside enter/leave, used only in this batch.
        let r = unsafe { region::by_slot(slot, gen) };
        // A folio holding a pager thread's thread vector stays; it goes back to the young end,
        // and a batch that meets nothing else stops.
        if let Some(reg) = r.filter(|reg| page < reg.npages) {
            if holds_pinned(reg, page, order) {
                inc(&p.counters.reclaim_pinned_skipped, 1);
                if !lru.active.push(e) {
                    lru.protected.push(e);
                }
                if pinned_skips == 0 {
                    return None;
                }
                pinned_skips -= 1;
                continue;
            }
        }
        if let (Some(fd), Some(reg)) = (pagemap, r) {
            let n = 1usize << order;
            if skips >= n && page < reg.npages && crate::sys::all_shared(fd, reg.addr(page), n) && lru.active.push(e) {
                skips -= n;
                inc(&p.counters.reclaim_cow_skipped, 1);
                continue;
            }
        }
        return Some((r, page, order, false));
    };
    let mut progress = 0;
    // Free swap-cache space is charged but holds no folio: give it back before evicting.
    let slack = p.limit() / 64;
    if p.cache.free_resident_bytes() > slack {
        progress += (p.cache.trim(slack / 2) / PAGE_SIZE as u64) as usize;
    }
    // A floor of resident pages. When the swap cache and the pool hold most of the limit,
    // evicting the last resident folios only makes the next fault evict the page the previous
    // one mapped: an instruction that touches two pages (a copy across a page boundary) would
    // then fault forever. At the floor, only the swap cache gives memory back (into the pool,
    // compressed); if that is not enough the charge stays over the limit (`reclaim_fail`),
    // by at most the floor.
    let floor = (limit_pages / 8).max(4 * (p.cfg.folio_size / PAGE_SIZE)) as i64;
    let at_floor = p.charge.resident_pages.load(Ordering::Relaxed) <= floor;
    let bypass = !at_floor && two && lru.ws.bypassed();
    if at_floor {
        progress += shrink_inactive(p, batch);
    } else if bypass {
        if p.cache.live_bytes() + (batch * PAGE_SIZE) as u64 > target {
            progress += shrink_inactive(p, batch);
        }
        progress += evict_resident(p, false, true, batch, &mut next);
    } else if two {
        // Age the inactive list first (this is what lowers the charge), then refill it from
        // the active list so that it keeps its share of the limit.
        let cache = p.cache.live_bytes();
        if cache + (batch * PAGE_SIZE) as u64 > target || lru.active.is_empty() {
            progress += shrink_inactive(p, batch);
        }
        if p.cache.live_bytes() < target || progress == 0 {
            progress += evict_resident(p, true, false, batch, &mut next);
        }
    } else {
        progress += evict_resident(p, false, false, batch, &mut next);
    }
    IN_RECLAIM.with(|c| c.set(c.get() - 1));
    progress > 0
}

/// Reclaim until `need` more bytes fit under the limit (or nothing more can be reclaimed).
pub(crate) fn direct_reclaim(p: &Pager, need: u64) {
    let limit = p.limit();
    let mut stuck = 0;
    while p.charged_bytes() + need > limit {
        if reclaim_batch(p) {
            stuck = 0;
        } else {
            stuck += 1;
            if stuck > 2 {
                inc(&p.counters.reclaim_fail, 1);
                return;
            }
        }
    }
}

/// Compress the oldest inactive (cached) folios into the store. Returns pages freed from the
/// cache.
fn shrink_inactive(p: &Pager, max_pages: usize) -> usize {
    let mut done = 0;
    // The new words of a folio, in a buffer's side area (not on this stack: direct reclaim
    // runs inside a fault, in SIGBUS mode on the program's stack).
    let mut bi = p.bufs.take();
    let words = &mut bi.parts().1.kept;
    while done < max_pages {
        let Some(e) = p.lru.inactive.pop() else { break };
        let (slot, gen, page, order) = decode(e);
        // SAFETY: reclaim runs between region::enter and leave (kswapd, or direct reclaim in a
        // fault), and r does not outlive this pass.
        let Some(r) = (unsafe { region::by_slot(slot, gen) }) else { continue };
        if page >= r.npages {
            continue;
        }
        let n = 1usize << order;
        let w0 = r.word(page).load(Ordering::Acquire);
        if w0.kind() != kind::CACHED || w0.order() != order {
            continue; // promoted or released since
        }
        if !claim_cached(r, page, n, w0) {
            continue;
        }
        let o = region::cached_obj(w0, order);
        if keep_or_forget_clean(p, o, n, &mut words[..n]) {
            // A clean folio: its entries still hold it; nothing to compress.
            for i in 0..n {
                r.word(page + i).store(words[i], Ordering::Release);
            }
            p.cache.free(o);
            inc(&p.counters.clean_evicted, n as u64);
            done += n;
            continue;
        }
        // SAFETY: the cache object holds this folio's bytes and is ours (pages claimed).
        let data = unsafe { std::slice::from_raw_parts(p.cache.ptr(o), PAGE_SIZE << order) };
        match store_folio(p, data, order, &mut words[..n]) {
            Ok(()) => {
                for i in 0..n {
                    r.word(page + i).store(words[i], Ordering::Release);
                }
                p.cache.free(o);
                done += n;
            }
            Err(_) => {
                store_failed(p);
                for i in 0..n {
                    r.word(page + i).store(w0, Ordering::Release);
                }
                p.lru.inactive.push(e);
                break;
            }
        }
    }
    done
}

/// True if the folio at `page` (of `order`) holds a pinned range (`own::pinned`: a pager
/// thread's thread vector), which reclaim leaves resident.
fn holds_pinned(r: &RegionInner, page: usize, order: u32) -> bool {
    let start = r.addr(page);
    crate::own::pinned(start, start + (PAGE_SIZE << order))
}

/// Evict every resident and cached page of `r` to the store. Call inside enter()/leave().
pub(crate) fn evict_region(r: &'static RegionInner) -> usize {
    let p = r.pager();
    IN_RECLAIM.with(|c| c.set(c.get() + 1));
    let fo = r.folio_order;
    let mut next_page = 0usize;
    let mut total = 0;
    loop {
        let mut next = || {
            if next_page >= r.npages {
                return None;
            }
            let mut pg = next_page;
            next_page += 1 << fo;
            // A folio holding a pager thread's thread vector stays.
            while holds_pinned(r, pg, fo) {
                if next_page >= r.npages {
                    return None;
                }
                pg = next_page;
                next_page += 1 << fo;
            }
            Some((Some(r), pg, fo, true))
        };
        let n = evict_resident(p, false, false, MAX_BATCH_PAGES / 2, &mut next);
        total += n;
        if next_page >= r.npages {
            break;
        }
    }
    // Cached folios of this region: compress them now.
    let mut bi = p.bufs.take();
    let words = &mut bi.parts().1.kept;
    let mut pg = 0;
    while pg < r.npages {
        let w0 = r.word(pg).load(Ordering::Acquire);
        if w0.kind() != kind::CACHED {
            pg += 1;
            continue;
        }
        let order = w0.order();
        let n = 1usize << order;
        let head = pg & !(n - 1);
        if !claim_cached(r, head, n, w0) {
            pg = head + n;
            continue;
        }
        let o = region::cached_obj(w0, order);
        // SAFETY: cache object of this claimed piece.
        let data = unsafe { std::slice::from_raw_parts(p.cache.ptr(o), PAGE_SIZE << order) };
        if keep_or_forget_clean(p, o, n, &mut words[..n]) || store_folio(p, data, order, &mut words[..n]).is_ok() {
            for i in 0..n {
                r.word(head + i).store(words[i], Ordering::Release);
            }
            p.cache.free(o);
            total += n;
        } else {
            for i in 0..n {
                r.word(head + i).store(w0, Ordering::Release);
            }
        }
        pg = head + n;
    }
    IN_RECLAIM.with(|c| c.set(c.get() - 1));
    total
}

/// Claim the whole cached piece of `n` pages at `head` (all its pages carry the word `w0`):
/// every word goes from `w0` to BUSY, or, when one has changed since, none does (the claimed
/// ones get `w0` back) and the answer is false.
fn claim_cached(r: &RegionInner, head: usize, n: usize, w0: PageWord) -> bool {
    let mut got = 0;
    while got < n
        && r.word(head + got).compare_exchange(w0, PageWord::BUSY, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    {
        got += 1;
    }
    if got < n {
        for i in 0..got {
            r.word(head + i).store(w0, Ordering::Release);
        }
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page shared copy-on-write with a fork child reads as shared (`sys::all_shared`, what
    /// the skip in `reclaim_batch` asks); once the parent writes it (its copy parts) or for
    /// a page never shared, not.
    #[test]
    fn pagemap_tells_pages_a_fork_child_maps_too() {
        const N: usize = 8;
        let m = crate::own::Mapping::new(N * PAGE_SIZE).expect("mapping");
        let base = m.as_ptr() as usize;
        // SAFETY: writes inside the mapping, which nothing else uses.
        unsafe { std::ptr::write_bytes(m.as_ptr(), 7, N * PAGE_SIZE) };
        let fd = crate::sys::open_raw(c"/proc/self/pagemap").expect("open /proc/self/pagemap");
        assert!(!crate::sys::all_shared(fd, base, N), "nothing is shared before the fork");
        // SAFETY: the child only waits to be killed (no allocation, no lock).
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            loop {
                // SAFETY: pause(2) has no preconditions.
                unsafe { libc::pause() };
            }
        }
        let shared = crate::sys::all_shared(fd, base, N);
        // SAFETY: a write to the first page of the mapping: its copy parts from the child's.
        unsafe { m.as_ptr().write(9) };
        let first = crate::sys::all_shared(fd, base, 1);
        let rest = crate::sys::all_shared(fd, base + PAGE_SIZE, N - 1);
        // SAFETY: kill and reap our own child; close the descriptor opened above.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
            libc::close(fd);
        }
        assert!(shared, "every page is shared with the child after the fork");
        assert!(!first, "a page written after the fork is the parent's alone");
        assert!(rest, "the pages not written are still shared");
    }
}
