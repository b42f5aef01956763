//! The fills: how a page that is not mapped (`NONE`, `SWAPPED` or `CACHED`) gets its data,
//! by where the data is ([`fill`]).
//!
//! Every fill is one sequence: **claim** the pages ([`Claim`]), **load** the data (the swap
//! cache, a buffer from the store, or zeros), **copy** it into place and **publish** the pages
//! mapped ([`super::map`]), and **put** what held the data before (store entries, the cache
//! object). How many pages a fill takes is [`super::readahead`]'s.
//!
//! Of the pager: the uffd, the store, the swap cache and the bounce buffers, the active list and
//! workingset (`lru`), the clean-page policy (`keep`), the counters and the resident page count
//! (`charge`).
//!
//! Locking: the claims of [`crate::page`] (a [`Claim`] rolls back to the old words when
//! dropped unpublished, so every way out of a fill leaves no page `BUSY`); the engine locks of
//! the store's `load` and `put`; a buffer from the pool ([`crate::bufs`], taken by CAS) before
//! any page is claimed, so a fill never waits for the pool while holding pages.

use super::map::{copy_runs, note_refaults, publish, wake_page, Mapped};
use super::readahead::{ahead_window, large_whole, readahead_done, small_window, stored_on_file};
use crate::bufs::Scratch;
use crate::page::{kind, Claim, PageSet, PageWord, CLEAN_MAX_ENTRY};
use crate::reclaim::{self, entry};
use crate::region::{self, RegionInner};
use crate::stats::inc;
use crate::store::PageLoad;
use crate::uffd::Filled;
use crate::{Pager, PAGE_SIZE};
use std::sync::atomic::Ordering;

/// Fill the folio around `pg` (state `w0`). Returns false when it lost a race (retry).
///
/// Every way of filling is the same sequence: **claim** the pages (a [`Claim`]: CAS to
/// `BUSY`, rolled back if the path gives up), **load** the data (the swap cache, a buffer
/// from the store, or zeros), **copy** it into place (`UFFDIO_COPY`; pages the kernel refuses
/// are rolled back), **publish** the pages mapped (RESIDENT, or CLEAN keeping their swap
/// entries), and **put** what held the data before (store entries, the cache object). The
/// four ways differ in which pages they claim and where the data comes from:
/// - [`fill_cached`]: a refault from the swap cache, the whole cached folio;
/// - [`fill_large`]: a large stored folio swapped in whole (or its still-stored parts);
/// - [`fill_one_of_large`]: only the faulting page of a large stored folio;
/// - [`fill_small`]: zero-fill or 4 KiB swap-in (a whole folio, a readahead window, a page);
/// - [`fill_ahead`]: a random 4 KiB swap-in from a file, reading its neighbours into the
///   swap cache.
pub(super) fn fill(p: &Pager, r: &'static RegionInner, pg: usize, w0: PageWord, write: bool, wake: bool) -> bool {
    let k0 = w0.order();
    match w0.kind() {
        kind::CACHED => fill_cached(p, r, pg, w0, write, wake),
        kind::SWAPPED if k0 > 0 => {
            if large_whole(p, r, pg) {
                fill_large(p, r, pg, w0, write, wake)
            } else {
                fill_one_of_large(p, r, pg, w0, write, wake)
            }
        }
        _ => fill_small(p, r, pg, w0, write, wake),
    }
}

/// Refault of an inactive folio: promote it whole from the swap cache.
fn fill_cached(p: &Pager, r: &'static RegionInner, pg: usize, w0: PageWord, write: bool, wake: bool) -> bool {
    let k0 = w0.order();
    let n = 1usize << k0;
    let head = pg & !(n - 1);
    // Claim: all pages or none.
    let mut bi = p.bufs.take();
    let (_, Scratch { old, kept }) = bi.parts();
    let mut c = Claim::new(r.words(head, n), old);
    for i in 0..n {
        if !c.take(i, w0) {
            return false; // the claim rolls back
        }
    }
    // Load: the cache object holds the folio. A clean folio demoted here still has its swap
    // entries: a read maps it clean again.
    let o = region::cached_obj(w0, k0);
    let ahead = reclaim::ahead_pages(p, o, n);
    let k = reclaim::clean_tags(p, o, n, kept);
    let clean = k == n && !write && p.keep.keep(p);
    // Copy.
    // SAFETY: the cache object holds the folio; the pages are claimed and missing.
    let res = unsafe { p.uffd.copy(r.addr(head), p.cache.ptr(o), PAGE_SIZE << k0, clean, wake) };
    if res.is_err() {
        if n == 1 || crate::uffd::AGAIN.with(|c| c.get()) {
            c.roll_back_all();
            wake_page(p, r, pg, wake);
            return true; // unmapped meanwhile, or an event pending (retried)
        }
        // The folio spans mappings the kernel will not fill in one call (part of it
        // is PROT_NONE now): promote it page by page; a page that cannot be mapped
        // keeps its data in the store.
        uncache_by_page(p, r, head, o, &kept[..n], &mut c, wake);
        wake_page(p, r, pg, wake);
        return true;
    }
    // Publish, put. A page that was present already is the kernel's truth: not clean (see
    // `Copied::existed`).
    let clean = clean && matches!(res, Ok(Filled::Done));
    reclaim::clear_clean_tags(p, o, n);
    let hot = reclaim::refault_is_hot(p, r, pg);
    if clean {
        publish(p, r, head, &mut c, Mapped::CleanKept(&kept[..n]), hot);
    } else {
        for &w in kept[..n].iter().filter(|&&w| w != PageWord::NONE) {
            p.store.put(w.payload(), 1);
        }
        publish(p, r, head, &mut c, Mapped::Resident, hot);
    }
    p.cache.free(o);
    inc(&p.counters.fault_cache, 1);
    if ahead > 0 {
        inc(&p.counters.swap_ra_hit, ahead);
        p.ahead.hit(ahead);
    }
    if !p.lru.ws.bypassed() {
        // (While bypassed, the swap cache is not aged: a hit on what it still holds
        // from before says nothing about recency; shadows measure instead.)
        p.lru.ws.hit(1);
    }
    true
}

/// Swap in a large stored folio whole: take every page of the folio still in the store
/// (pages swapped in alone earlier are skipped), load the folio once, copy the runs.
fn fill_large(p: &Pager, r: &'static RegionInner, pg: usize, w0: PageWord, write: bool, wake: bool) -> bool {
    let k0 = w0.order();
    let n = 1usize << k0;
    let head = pg & !(n - 1);
    let e_head = w0.payload() - (pg - head) as u64;
    // Claim: every page still holding its stored word; the faulting one at least.
    let mut bi = p.bufs.take();
    let (data, scratch) = bi.parts();
    let mut c = Claim::new(r.words(head, n), &mut scratch.old);
    let mut all = true;
    for i in 0..n {
        all &= c.take(i, PageWord::swapped(k0, e_head + i as u64));
    }
    if !c.held(pg - head) {
        return false; // the claim rolls back
    }
    // Load: the whole folio in one load, or its still-stored parts block by block.
    let buf = &mut data[..PAGE_SIZE << k0];
    let mut res = Ok(());
    if all {
        res = p.store.load(e_head, buf);
    } else {
        reclaim::blocks(0, n, &|i| c.held(i), |i, k| {
            if res.is_ok() {
                res = p.store.load(e_head + i as u64, &mut buf[i * PAGE_SIZE..(i + (1 << k)) * PAGE_SIZE]);
            }
        });
    }
    if res.is_err() {
        crate::sys::fatal("uswap-pager: swap-in failed: stored data is corrupt or missing\n");
    }
    // Copy.
    let clean = all && !write && e_head + (n as u64) < CLEAN_MAX_ENTRY && p.keep.keep(p);
    let Some(copied) = copy_runs(p, r, head, &c, buf.as_ptr(), clean, wake) else {
        c.roll_back_all();
        return true;
    };
    // Pages the kernel would not fill keep their words.
    c.roll_back(&copied.failed);
    let clean = clean && c.all_held() && !copied.existed;
    if !c.held(pg - head) {
        wake_page(p, r, pg, wake);
    }
    // Publish, put.
    let hot = reclaim::refault_is_hot(p, r, pg);
    if clean {
        publish(p, r, head, &mut c, Mapped::CleanOld, hot);
    } else {
        for i in 0..n {
            if c.held(i) {
                p.store.put(e_head + i as u64, 1);
            }
        }
        publish(p, r, head, &mut c, Mapped::Resident, hot);
    }
    note_refaults(p, r, head, (0..n).map(|i| c.held(i)));
    if all {
        inc(&p.counters.swpin[k0 as usize], 1);
    } else {
        // As the kernel's mTHP fallback: the folio was not swapped in whole; the pages that
        // were are counted as order-0 swap-ins (so `swpin` alone adds up to pswpin).
        inc(&p.counters.swpin_fallback[k0 as usize], 1);
        inc(&p.counters.swpin[0], (0..n).filter(|&i| c.held(i)).count() as u64);
    }
    inc(&p.counters.fault_swapin, 1);
    true
}

/// Swap in only page `pg` of a large stored folio (`swpin_fallback`).
fn fill_one_of_large(p: &Pager, r: &'static RegionInner, pg: usize, w0: PageWord, write: bool, wake: bool) -> bool {
    let k0 = w0.order();
    let e = w0.payload();
    // Claim.
    let mut bi = p.bufs.take();
    let (data, scratch) = bi.parts();
    let mut c = Claim::new(r.words(pg, 1), &mut scratch.old);
    if !c.take(0, w0) {
        return false;
    }
    // Load.
    let buf = &mut data[..PAGE_SIZE];
    if p.store.load(e, buf).is_err() {
        crate::sys::fatal("uswap-pager: swap-in failed: stored data is corrupt or missing\n");
    }
    // Copy, publish, put.
    if !map_one(p, r, pg, &mut c, e, buf, write, wake) {
        return true;
    }
    inc(&p.counters.swpin_fallback[k0 as usize], 1);
    inc(&p.counters.swpin[0], 1);
    inc(&p.counters.fault_swapin, 1);
    true
}

/// Map page `pg`, claimed alone by `c` (its old word SWAPPED at entry `e`), from `data` (its
/// 4 KiB), and publish it: clean, keeping `e`, for a read while clean pages are kept, else
/// resident with `e` put. False when the kernel refused the copy (unmapped meanwhile, or an
/// event pending): the page is rolled back and its thread woken.
#[expect(clippy::too_many_arguments, reason = "the page, its claim, entry and data, and the fault's flags")]
fn map_one(
    p: &Pager,
    r: &RegionInner,
    pg: usize,
    c: &mut Claim<'_>,
    e: u64,
    data: &[u8],
    write: bool,
    wake: bool,
) -> bool {
    let clean = !write && e < CLEAN_MAX_ENTRY && p.keep.keep(p);
    // SAFETY: page pg is claimed and missing; `data` holds its 4 KiB.
    let res = unsafe { p.uffd.copy(r.addr(pg), data.as_ptr(), PAGE_SIZE, clean, wake) };
    if res.is_err() {
        c.roll_back_all();
        wake_page(p, r, pg, wake);
        return false;
    }
    // A page present already is not clean: see `Copied::existed`.
    let clean = clean && matches!(res, Ok(Filled::Done));
    let hot = reclaim::refault_is_hot(p, r, pg);
    if clean {
        publish(p, r, pg, c, Mapped::CleanOld, hot);
    } else {
        p.store.put(e, 1);
        publish(p, r, pg, c, Mapped::Resident, hot);
    }
    note_refaults(p, r, pg, std::iter::once(true));
    true
}

/// Zero-fill or 4 KiB swap-in around `pg`: the whole folio of the region when faults are
/// sequential (a swap-in: a stream of [`STREAM_STEPS`]; or not adaptive), a readahead window
/// in 4 KiB regions, else just the page ([`small_window`]).
///
/// [`STREAM_STEPS`]: super::readahead::STREAM_STEPS
fn fill_small(p: &Pager, r: &'static RegionInner, pg: usize, w0: PageWord, write: bool, wake: bool) -> bool {
    let fo = r.folio_order;
    let (first, n) = small_window(p, r, pg, w0);
    if n == 1 {
        if let Some((first, n)) = ahead_window(p, r, pg, w0) {
            return fill_ahead(p, r, pg, w0, write, wake, first, n);
        }
    }
    // Claim: zero-fill and 4 KiB stored pages; the faulting one at least.
    let mut bi = p.bufs.take();
    let (data, scratch) = bi.parts();
    let mut c = Claim::new(r.words(first, n), &mut scratch.old);
    let mut any_swapped = false;
    let mut all_swapped = true;
    for i in 0..n {
        let q = first + i;
        let w = if q == pg { w0 } else { r.word(q).load(Ordering::Acquire) };
        let k = w.kind();
        let ok = (k == kind::NONE || (k == kind::SWAPPED && w.order() == 0)) && c.take(i, w);
        if ok {
            any_swapped |= k == kind::SWAPPED;
            all_swapped &= k == kind::SWAPPED && w.payload() < CLEAN_MAX_ENTRY;
        } else if q == pg {
            return false; // the claim rolls back
        } else if fo == 0 {
            // Readahead window: stop at the first page we cannot take.
            break;
        }
    }
    if !any_swapped && !write && n == 1 {
        // A read of a never-written page: map the shared zero page.
        if p.uffd.zeropage(r.addr(pg), PAGE_SIZE, wake).is_err() {
            c.roll_back_all();
            wake_page(p, r, pg, wake);
            return true;
        }
        publish(p, r, first, &mut c, Mapped::Resident, false);
        inc(&p.counters.fault_zero, 1);
        return true;
    }
    // Load: stored pages from the store, the others zero.
    let src: *const u8 = if any_swapped {
        let buf = &mut data[..n * PAGE_SIZE];
        for i in 0..n {
            if !c.held(i) {
                continue;
            }
            let dst = &mut buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE];
            if c.old(i).kind() == kind::SWAPPED {
                if p.store.load(c.old(i).payload(), dst).is_err() {
                    crate::sys::fatal("uswap-pager: swap-in failed: stored data is corrupt or missing\n");
                }
            } else {
                dst.fill(0);
            }
        }
        buf.as_ptr()
    } else {
        p.bufs.zero()
    };
    // Copy.
    let clean = any_swapped && all_swapped && !write && p.keep.keep(p);
    let Some(copied) = copy_runs(p, r, first, &c, src, clean, wake) else {
        c.roll_back_all();
        return true;
    };
    // Pages the kernel would not fill keep their words (and their entries).
    c.roll_back(&copied.failed);
    let clean = clean && !copied.existed;
    if !c.held(pg - first) {
        wake_page(p, r, pg, wake);
    }
    // Publish, put.
    let swapped_at = |c: &Claim<'_>, i: usize| c.held(i) && c.old(i).kind() == kind::SWAPPED;
    let mut swapped = 0u64;
    for i in 0..n {
        if swapped_at(&c, i) {
            if !clean {
                p.store.put(c.old(i).payload(), 1);
            }
            swapped += 1;
        }
    }
    let hot = w0.kind() == kind::SWAPPED && reclaim::refault_is_hot(p, r, pg);
    publish(p, r, first, &mut c, if clean { Mapped::CleanOld } else { Mapped::Resident }, hot);
    if swapped > 0 {
        note_refaults(p, r, first, (0..n).map(|i| swapped_at(&c, i)));
    }
    if w0.kind() == kind::SWAPPED {
        inc(&p.counters.fault_swapin, 1);
        inc(&p.counters.swpin[0], swapped);
        if fo == 0 && n > 1 {
            readahead_done(p, r, first, n, swapped);
        }
    } else {
        inc(&p.counters.fault_zero, 1);
        if swapped > 0 {
            inc(&p.counters.swpin[0], swapped);
        }
    }
    true
}

/// A random 4 KiB swap-in at `pg` (state `w0`) whose data is on a tier outside RAM, with
/// readahead over `[first, first + n)` ([`ahead_window`]): the window's other stored 4 KiB
/// pages on such a tier are read with the faulting one in one
/// [`crate::PageStore::load_pages`] (the store reads along only what costs no wait of its
/// own). The faulting page is mapped as a one-page [`fill_small`] maps it, and so are the
/// pages read ahead (clean, their entries kept, on the active list: a program that uses them
/// takes no fault at all), except one, the *probe*, which goes to the swap cache: CACHED,
/// its entry kept ([`reclaim::TAG_CLEAN`]), marked read ahead ([`reclaim::TAG_AHEAD`]), on
/// the inactive list. A fault on a probe is a swap-cache hit (`swap_ra_hit`), and the probes'
/// hit rate is what says whether readahead pays ([`super::readahead::AheadTracker`]); a
/// mapped page nobody uses is evicted clean, without a write. A page read ahead that fails
/// to load, to map, or finds no room in the swap cache keeps its word.
#[expect(clippy::too_many_arguments, reason = "fill's arguments and the window ahead_window chose")]
fn fill_ahead(
    p: &Pager,
    r: &'static RegionInner,
    pg: usize,
    w0: PageWord,
    write: bool,
    wake: bool,
    first: usize,
    n: usize,
) -> bool {
    let e = w0.payload();
    // Claim: the faulting page (`me`) alone; the window's other stored 4 KiB pages on a tier
    // outside RAM, one of them the probe (`probe`), the others to map (`ahead`). Each claim
    // publishes its own way.
    let mut bi = p.bufs.take();
    let (data, scratch) = bi.parts();
    let (old_me, rest) = scratch.old.split_at_mut(1);
    let (old_probe, old_ahead) = rest.split_at_mut(n);
    let mut me = Claim::new(r.words(pg, 1), old_me);
    if !me.take(0, w0) {
        return false;
    }
    let mut probe = Claim::new(r.words(first, n), old_probe);
    let mut ahead = Claim::new(r.words(first, n), old_ahead);
    let at = p.ahead.probe_at(n);
    let mut probed = false;
    for k in 0..n {
        // From the probe's place on, round the window: the probe is the first taken there.
        let i = (at + k) % n;
        if first + i == pg {
            continue;
        }
        let w = r.word(first + i).load(Ordering::Acquire);
        if !stored_on_file(p, w) {
            continue;
        }
        if !probed {
            probed = probe.take(i, w);
        } else {
            ahead.take(i, w);
        }
    }
    // Load: one batch, each page in its place in the window.
    let buf = &mut data[..n * PAGE_SIZE];
    let mut failed = PageSet::default();
    let mut me_ok = false;
    {
        let mut reqs: [PageLoad<'_>; uswap::SWAP_IN_BATCH] =
            std::array::from_fn(|_| PageLoad { entry: 0, out: &mut [], ahead: true, result: Ok(()) });
        let mut of = [0usize; uswap::SWAP_IN_BATCH];
        let mut k = 0;
        for (i, page) in buf.chunks_exact_mut(PAGE_SIZE).enumerate() {
            let mine = first + i == pg;
            let entry = if mine {
                e
            } else if probe.held(i) {
                probe.old(i).payload()
            } else if ahead.held(i) {
                ahead.old(i).payload()
            } else {
                continue;
            };
            reqs[k] = PageLoad { entry, out: page, ahead: !mine, result: Ok(()) };
            of[k] = i;
            k += 1;
        }
        p.store.load_pages(&mut reqs[..k]);
        for (q, &i) in reqs[..k].iter().zip(&of) {
            if first + i == pg {
                me_ok = q.result.is_ok();
            } else if q.result.is_err() {
                failed.insert(i);
            }
        }
    }
    if !me_ok {
        crate::sys::fatal("uswap-pager: swap-in failed: stored data is corrupt or missing\n");
    }
    // Every held page was asked for: those not read keep their words.
    probe.roll_back(&failed);
    ahead.roll_back(&failed);
    // The faulting page (a failure gives every page back: they keep their words).
    let mine = &buf[(pg - first) * PAGE_SIZE..(pg - first + 1) * PAGE_SIZE];
    if !map_one(p, r, pg, &mut me, e, mine, write, wake) {
        probe.roll_back_all();
        ahead.roll_back_all();
        return true;
    }
    // The probe into the swap cache, clean, on the inactive list.
    let mut probes = 0u64;
    let probe_set = probe.held_set();
    for i in (0..n).filter(|&i| probe_set.contains(i)) {
        let Some(o) = p.cache.alloc(PAGE_SIZE) else {
            probe.roll_back_all();
            break;
        };
        // SAFETY: the cache object is ours and one page long; buf holds page i's data.
        unsafe { std::ptr::copy_nonoverlapping(buf[i * PAGE_SIZE..].as_ptr(), p.cache.ptr(o), PAGE_SIZE) };
        let t = reclaim::TAG_CLEAN | reclaim::TAG_AHEAD | crate::page::clean_payload(probe.old(i).payload(), 0);
        p.cache.tag(o, 0).store(t, Ordering::Relaxed);
        probe.set(i, PageWord::cached(0, (o.off / crate::arena::GRANULE) as u64));
        if !p.lru.inactive.push(entry(r, first + i, 0)) {
            // Inactive list full: the page stays cached until it refaults or its region goes
            // (as a demoted folio that finds the list full).
            inc(&p.counters.reclaim_fail, 1);
        }
        probes += 1;
    }
    p.ahead.read_ahead(probes);
    // The other pages read ahead, mapped (no one waits for them: no wake).
    let mut mapped = 0u64;
    if (0..n).any(|i| ahead.held(i)) {
        let wp = p.keep.keep(p);
        match copy_runs(p, r, first, &ahead, buf.as_ptr(), wp, false) {
            None => ahead.roll_back_all(),
            Some(copied) => {
                ahead.roll_back(&copied.failed);
                let clean = wp && !copied.existed;
                if !clean {
                    for i in (0..n).filter(|&i| ahead.held(i)) {
                        p.store.put(ahead.old(i).payload(), 1);
                    }
                }
                let how = if clean { Mapped::CleanOld } else { Mapped::Resident };
                mapped = publish(p, r, first, &mut ahead, how, false) as u64;
            }
        }
    }
    inc(&p.counters.swap_ra, probes + mapped);
    inc(&p.counters.swpin[0], 1 + probes + mapped);
    inc(&p.counters.fault_swapin, 1);
    true
}

/// Promote the cached folio `[head, head + n)` (cache object `o`, every page held by `c`,
/// `kept` its pages' kept SWAPPED words) page by page: pages the kernel maps become RESIDENT,
/// the others are stored as 4 KiB pages (their data is never dropped). Publishes every page
/// of `c`, and frees the cache object.
fn uncache_by_page(
    p: &Pager,
    r: &RegionInner,
    head: usize,
    o: crate::arena::Obj,
    kept: &[PageWord],
    c: &mut Claim<'_>,
    wake: bool,
) {
    let n = c.len();
    reclaim::clear_clean_tags(p, o, n);
    let mut mapped = 0i64;
    for i in 0..n {
        // SAFETY: page i of the claimed cache object.
        let src = unsafe { p.cache.ptr(o).add(i * PAGE_SIZE) };
        // SAFETY: src is one readable page; the destination page is claimed.
        if unsafe { p.uffd.copy(r.addr(head + i), src, PAGE_SIZE, false, wake) }.is_ok() {
            if kept[i] != PageWord::NONE {
                p.store.put(kept[i].payload(), 1);
            }
            c.set(i, PageWord::resident(0));
            p.lru.active.push(entry(r, head + i, 0));
            mapped += 1;
            continue;
        }
        if kept[i] != PageWord::NONE {
            c.set(i, PageWord::swapped(0, kept[i].payload()));
            continue;
        }
        // SAFETY: as above.
        let d = unsafe { std::slice::from_raw_parts(src, PAGE_SIZE) };
        let mut nw = [PageWord::NONE; 1];
        if reclaim::store_folio(p, d, 0, &mut nw).is_ok() {
            c.set(i, PageWord::swapped(0, nw[0].payload()));
        } else {
            crate::sys::fatal("uswap-pager: a cached page could be neither mapped nor stored\n");
        }
    }
    p.charge.resident_pages.fetch_add(mapped, Ordering::AcqRel);
    p.cache.free(o);
}
