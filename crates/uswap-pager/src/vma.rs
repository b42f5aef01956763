//! Memory where it lies: adopting a program's own anonymous mappings, and following them
//! through `munmap`, `mremap` and `madvise` (the kernel's VMA tree, as far as a pager needs it).
//!
//! A pager that only pages memory it mapped itself makes a program use *its* allocator. This
//! module lets it page the program's memory instead, wherever the program got it (glibc's
//! heap and its internal `mmap`s, jemalloc, pymalloc arenas, a JVM's or V8's heap):
//! - [`adopt`] registers an existing anonymous private range with the uffd and publishes
//!   regions over it (pieces of whole folios, then 4 KiB pages for a ragged tail); the pages
//!   already present become `RESIDENT` and join the active list, so reclaim can take them.
//!   Parts already covered by a live region are skipped, so adopting twice is harmless.
//! - [`release`] applies an `UNMAP` or `REMOVE` event: the pages' swap entries and cache
//!   copies are freed; unmapped pages become `UNMAPPED` (an adopted region whose pages are all
//!   unmapped is retired by [`reap`]). A `REMOVE` on pages an eviction is dropping
//!   ([`PageWord::BUSY_DROP`]) is the pager's own and is ignored.
//! - [`remap`] applies a `REMAP` event: the kernel moved the pages and their registration; the
//!   page words move to a new region at the new address (orders are kept when the move keeps
//!   folio alignment, else the words become 4 KiB ones; cached folios are stored first).
//!
//! The event functions run on the thread that reads the uffd and never wait for a page held
//! by another thread (that thread may be blocked until this one reads its event): they return
//! false and the event is retried later.
//!
//! Locking: [`Pager::vma_lock`](crate::Pager) serializes adoption, remap and retirement (so
//! two adopters cannot publish overlapping regions). It is never held across anything that
//! waits for the event thread (callers sync events *before* taking it), nor while touching
//! program memory. Page words change only by CAS, as everywhere ([`crate::region`]).

use crate::page::{kind, PageWord};
use crate::region::{self, RegionInner};
use crate::stats::inc;
use crate::{Pager, PagerError, PAGE_SIZE};
use std::sync::atomic::Ordering;

/// Adopt `[start, start + len)`, an anonymous private mapping of the program (page aligned).
/// Returns the bytes newly put under the pager. A range that overlaps the pager's own memory
/// ([`crate::own`]) is left alone whole: the pager records a mapping only after `mmap` returns,
/// so a neighbour the kernel merged with it may be the pager's too, not recorded yet (adopting
/// around the recorded part made node's event thread fault on its own region words).
pub(crate) fn adopt(p: &Pager, start: usize, len: usize) -> Result<usize, PagerError> {
    let start = start & !(PAGE_SIZE - 1);
    let end = (start + len).div_ceil(PAGE_SIZE) * PAGE_SIZE;
    if end <= start || crate::own::is_own(start, end) {
        return Ok(0);
    }
    // Unmap events read so far must be applied first, or a new region could be covered by an
    // old one's pages that are about to become UNMAPPED.
    p.sync_events();
    let _g = p.vma_lock.lock();
    // What not to adopt, as address ranges (never a per-page vector: a runtime's reservation
    // may span terabytes): pages a live region already holds.
    let mut taken: Vec<(usize, usize)> = Vec::new();
    region::enter();
    let visit = |r: &'static RegionInner| {
        let (a, b) = (r.start.max(start), (r.start + r.len).min(end));
        if a < b {
            let first = (a - r.start) / PAGE_SIZE;
            let live = |i: usize| (r.word(first + i).load(Ordering::Acquire)).kind() != kind::UNMAPPED;
            region::runs((b - a) / PAGE_SIZE, &live, |i, j| {
                taken.push((a + i * PAGE_SIZE, a + j * PAGE_SIZE));
                true
            });
        }
    };
    // SAFETY: between enter and leave; the references are not used after the leave.
    unsafe { region::for_each_in(p, start, end, visit) };
    region::leave();
    taken.sort_unstable();
    let mut adopted = 0;
    let mut first_err = None;
    let mut dead = Vec::new();
    let mut adopt_gap = |a: usize, b: usize| {
        if a < b {
            match adopt_run(p, a, b - a, &mut dead) {
                Ok(n) => adopted += n,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
    };
    let mut at = start;
    for &(a, b) in &taken {
        adopt_gap(at, a.min(end));
        at = at.max(b);
    }
    adopt_gap(at, end);
    drop(_g);
    for r in dead {
        // SAFETY: unpublished by adopt_piece; freed once, here, outside vma_lock and enter().
        unsafe { crate::reclaim::free_unpublished(r) };
    }
    if p.charged_bytes() > crate::reclaim::wake_mark(p) {
        crate::sys::futex_wake(&p.kswapd.wake);
    }
    match first_err {
        Some(e) if adopted == 0 => Err(e),
        _ => Ok(adopted),
    }
}

/// Adopt one uncovered run: whole folios, then the ragged tail in 4 KiB pages.
fn adopt_run(p: &Pager, start: usize, len: usize, dead: &mut Vec<*mut RegionInner>) -> Result<usize, PagerError> {
    let fo = (p.cfg.folio_size / PAGE_SIZE).trailing_zeros();
    let folio = PAGE_SIZE << fo;
    let head = len / folio * folio;
    let mut done = 0;
    if head > 0 {
        done += adopt_piece(p, start, head, fo, dead)?;
    }
    if len > head {
        done += adopt_piece(p, start + head, len - head, 0, dead)?;
    }
    Ok(done)
}

/// Why [`adopt_piece`] did not register its range (made under the [`crate::own::Adopting`]
/// guard, where nothing may allocate; turned into a [`PagerError`] after it).
enum Refused {
    /// Own mappings in flight.
    InFlight,
    /// The range is the pager's own now, or an own mapping went unrecorded.
    Own,
    /// `UFFDIO_REGISTER` failed.
    Register(crate::uffd::UffdError),
    /// Part of the range is no longer mapped, and this kernel cannot say which part (no
    /// `PAGEMAP_SCAN`): the maps must be read again.
    Changed,
}

/// Register the parts of `r`'s range that are mapped now, and mark the rest UNMAPPED.
///
/// The maps the caller read may be stale, and `UFFDIO_REGISTER` skips holes without an
/// error. glibc's malloc maps twice an arena's size and unmaps the misaligned ends at once; a
/// range registered across such a hole would have page words that say "registered" where the
/// kernel has nothing; pager mappings made there later (thread stacks, page words) would then
/// be registered by a fork child, which registers its parent's regions again from their
/// words, and it would hang faulting on its own page words. So the mapped runs are listed first
/// (`PAGEMAP_SCAN`) and only they are registered; and listed again after: a run unmapped in
/// between sent no unmap event (it was not registered yet), and its pages are marked here. A
/// run unmapped after registering sends its event, whose effect is the same mark. (Unmapped
/// in between and mapped again before the second listing, both by the program within two
/// system calls, a run would stay counted as registered.) A run that cannot be registered
/// (gone, or replaced by a mapping a uffd cannot take) is marked UNMAPPED too; the error is
/// returned only when no run was registered. Without `PAGEMAP_SCAN` (before Linux 6.7), a
/// range with a hole is refused ([`Refused::Changed`]) and the caller reads the maps again.
///
/// Called under the [`crate::own::Adopting`] guard: nothing here allocates.
fn register_mapped(p: &Pager, r: &RegionInner, mode: u64) -> Result<usize, Refused> {
    let (start, end) = (r.start, r.start + r.len);
    let unmapped = |a: usize, b: usize| {
        for i in (a - start) / PAGE_SIZE..(b - start) / PAGE_SIZE {
            r.mark_unmapped(i);
        }
    };
    let Some(fd) = p.pagemap.get(|_| crate::sys::open_raw(c"/proc/self/pagemap")) else {
        return register_whole(p, start, end, mode);
    };
    let (mut at, mut registered, mut first_err) = (start, 0, None);
    let listed = crate::sys::mapped_runs(fd, start, end, |a, b| {
        unmapped(at, a);
        match p.uffd.register(a, b - a, mode) {
            Ok(_) => registered += b - a,
            Err(e) => {
                unmapped(a, b);
                first_err.get_or_insert(e);
            }
        }
        at = b;
    });
    if listed.is_err() {
        return register_whole(p, start, end, mode);
    }
    unmapped(at, end);
    if registered == 0 {
        let e = first_err.unwrap_or(crate::uffd::UffdError { op: "UFFDIO_REGISTER", errno: libc::ENOMEM });
        return Err(Refused::Register(e));
    }
    let mut at = start;
    let _ = crate::sys::mapped_runs(fd, start, end, |a, b| {
        unmapped(at, a);
        at = b;
    });
    unmapped(at, end);
    Ok(registered)
}

/// [`register_mapped`] where `PAGEMAP_SCAN` is missing: the whole range, if it has no hole.
fn register_whole(p: &Pager, start: usize, end: usize, mode: u64) -> Result<usize, Refused> {
    if !crate::sys::all_mapped(start, end) {
        return Err(Refused::Changed);
    }
    p.uffd.register(start, end - start, mode).map(|_| end - start).map_err(Refused::Register)
}

fn adopt_piece(
    p: &Pager,
    start: usize,
    len: usize,
    order: u32,
    dead: &mut Vec<*mut RegionInner>,
) -> Result<usize, PagerError> {
    let r = region::publish_adopted(p, start, len, order)?;
    let mode = crate::uffd::mode::MISSING | crate::uffd::mode::WP;
    // The range may have become the pager's own since the maps were read: the program unmapped
    // it and a pager mapping took its place (even this region's words, just made above, on
    // which the scan thread would then fault). Checked and registered with own mappings held
    // off, so nothing own can move in between.
    // (Nothing under the guard allocates: an allocation may map, and a maker waits for it.)
    let registered = match crate::own::adopting() {
        None => Err(Refused::InFlight),
        // An own mapping left unrecorded (the table full) may be anywhere: adopt nothing.
        Some(_g) if crate::own::is_own(start, start + len) || crate::own::overflowed() > 0 => Err(Refused::Own),
        Some(_g) => register_mapped(p, r, mode),
    };
    let bytes = match registered {
        Ok(bytes) => bytes,
        Err(e) => {
            for i in 0..r.npages {
                r.mark_unmapped(i);
            }
            let r = r as *const RegionInner as *mut RegionInner;
            // SAFETY: published above; unpublished once; freed by the caller outside the lock.
            unsafe { region::unpublish(r) };
            dead.push(r);
            let at = format!("(adopting {len} bytes at {start:#x})");
            return Err(match e {
                // Transient: the caller tries again later (a reconciler that took it for good
                // would leave the program's memory unmanaged, over the limit).
                Refused::InFlight => PagerError::Busy(format!("own mappings in flight {at}")),
                Refused::Changed => PagerError::Busy(format!("the range changed since the maps were read {at}")),
                Refused::Own => PagerError::Os(format!("the range is own now, or own mappings went unrecorded {at}")),
                // Gone or not registrable (unmapped meanwhile, a VM_PFNMAP/hugetlb/shared mapping).
                Refused::Register(e) => PagerError::Os(format!("{e} {at}")),
            });
        }
    };
    inc(&p.counters.adopted_regions, 1);
    // Pages already present are resident: from here on the uffd reports the missing ones, so
    // this snapshot cannot miss a page that appears later.
    // In chunks (a power of two, so folios never straddle one) with one fixed buffer: a
    // reservation may be huge.
    const CHUNK: usize = 1 << 16;
    let mut present = vec![0u8; CHUNK.min(r.npages)];
    let mut count = 0u64;
    for c in (0..r.npages).step_by(CHUNK) {
        let n = CHUNK.min(r.npages - c);
        // SAFETY: mincore on a page-aligned range with one byte per page in the vector.
        let rc = unsafe { libc::mincore(r.addr(c) as *mut _, n * PAGE_SIZE, present.as_mut_ptr()) };
        if rc != 0 {
            // A hole (ENOMEM): each run of pages still mapped on its own.
            present[..n].fill(0);
            let mapped = |i: usize| r.word(c + i).load(Ordering::Acquire).kind() != kind::UNMAPPED;
            region::runs(n, &mapped, |i, j| {
                // SAFETY: as above, for pages c + i .. c + j and their bytes of the vector.
                let rc =
                    unsafe { libc::mincore(r.addr(c + i) as *mut _, (j - i) * PAGE_SIZE, present[i..j].as_mut_ptr()) };
                if rc != 0 {
                    present[i..j].fill(0);
                }
                true
            });
        }
        count += mark_present(p, r, c, &present[..n], order);
    }
    p.charge.resident_pages.fetch_add(count as i64, Ordering::AcqRel);
    inc(&p.counters.adopted_pages, count);
    Ok(bytes)
}

/// Pages `first..first + present.len()` of a just-registered region that `mincore` found
/// present become RESIDENT and join the active list, as folios of up to `order` where whole
/// aligned blocks are present. Returns how many pages it took.
fn mark_present(p: &Pager, r: &RegionInner, first: usize, present: &[u8], order: u32) -> u64 {
    let mut count = 0u64;
    crate::reclaim::blocks(first, present.len(), &|i| present[i] & 1 != 0, |pg, kb| {
        // Blocks larger than the region's folio come as several folios.
        let k = kb.min(order);
        let n = 1usize << k;
        for q in (pg..pg + (1usize << kb)).step_by(n) {
            let mut got = 0;
            for i in 0..n {
                if r.word(q + i)
                    .compare_exchange(PageWord::NONE, PageWord::resident(k), Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    got += 1;
                }
            }
            if got == n {
                push_active(p, r, q, k);
            } else {
                // A fault or an event got some pages first: queue the ones we took singly.
                for i in 0..n {
                    if r.word(q + i)
                        .compare_exchange(
                            PageWord::resident(k),
                            PageWord::resident(0),
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                    {
                        push_active(p, r, q + i, 0);
                    }
                }
            }
            count += got as u64;
        }
    });
    count
}

fn push_active(p: &Pager, r: &RegionInner, pg: usize, k: u32) {
    if !p.lru.active.push(crate::reclaim::entry(r, pg, k)) {
        // The active list is full: the folio stays resident unqueued (counted; the ring is
        // sized for several times the limit, so reclaim is far behind if this happens).
        inc(&p.counters.reclaim_fail, 1);
    }
}

/// The program is about to drop `[start, start + len)` with madvise: free what the pages hold.
pub(crate) fn discard(p: &Pager, start: usize, len: usize) {
    let end = start.saturating_add(len);
    region::enter();
    let visit = |r: &'static RegionInner| {
        let (a, b) = (r.start.max(start), (r.start + r.len).min(end));
        if a < b {
            crate::reclaim::release_pages_ex(
                r,
                (a - r.start) / PAGE_SIZE,
                (b - r.start).div_ceil(PAGE_SIZE),
                false,
                false,
            );
        }
    };
    // SAFETY: between enter and leave; the references are not used after the leave.
    unsafe { region::for_each_in(p, start, end, visit) };
    region::leave();
}

/// Free what pages `[lo, hi)` of `r` hold and mark them UNMAPPED, leaving pages another thread
/// holds. Returns false if some page was left (the caller retries later).
fn unmap_pages(r: &RegionInner, lo: usize, hi: usize) -> bool {
    crate::reclaim::release_pages_ex(r, lo, hi, false, true);
    let mut complete = true;
    for pg in lo..hi {
        let w = r.word(pg).load(Ordering::Acquire);
        match w.kind() {
            kind::UNMAPPED => {}
            kind::BUSY => complete = false,
            _ => {
                if r.word(pg).compare_exchange(w, PageWord::BUSY, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                    r.mark_unmapped(pg);
                } else {
                    complete = false;
                }
            }
        }
    }
    complete
}

/// Apply an `UNMAP` (`unmap`) or `REMOVE` event on `[start, end)`. Returns false if some
/// page is held by another thread (retry later; what could be done is done).
pub(crate) fn release(p: &Pager, start: usize, end: usize, unmap: bool) -> bool {
    let mut complete = true;
    region::enter();
    let visit = |r: &'static RegionInner| {
        let (a, b) = (r.start.max(start), (r.start + r.len).min(end));
        if a >= b {
            return;
        }
        let lo = (a - r.start) / PAGE_SIZE;
        let hi = (b - r.start).div_ceil(PAGE_SIZE);
        if unmap {
            complete &= unmap_pages(r, lo, hi);
            return;
        }
        crate::reclaim::release_pages_ex(r, lo, hi, false, true);
        // A REMOVE on a page our own eviction is dropping is ours; any other holder's page is
        // released once it is let go.
        complete &= (lo..hi).all(|pg| {
            let w = r.word(pg).load(Ordering::Acquire);
            !w.is_busy() || w == PageWord::BUSY_DROP
        });
    };
    // SAFETY: between enter and leave; the references are not used after the leave.
    unsafe { region::for_each_in(p, start, end, visit) };
    region::leave();
    if !complete {
        inc(&p.counters.ev_deferred, 1);
    }
    complete
}

/// Apply a `REMAP` event: the kernel moved `[from, from + len)` to `to` (with its uffd
/// registration). Returns false if some page is held by another thread (retry later; nothing
/// was changed).
pub(crate) fn remap(p: &Pager, from: usize, to: usize, len: usize) -> bool {
    let _g = p.vma_lock.lock();
    let end = from + len;
    region::enter();
    // The destination may already be covered: an adopter that read /proc/self/maps after the
    // kernel moved the pages but before this event was read published a region there, with the
    // moved-out pages as NONE. Those words are wrong (the moved words are the truth): retire
    // them first, or a fault could zero-fill a page that was swapped out.
    let mut clear = true;
    let visit = |r: &'static RegionInner| {
        let (a, b) = (r.start.max(to), (r.start + r.len).min(to + len));
        if a >= b || (r.start < end && r.start + r.len > from && a < end && b > from) {
            return;
        }
        let (lo, hi) = ((a - r.start) / PAGE_SIZE, (b - r.start) / PAGE_SIZE);
        clear &= unmap_pages(r, lo, hi);
    };
    // SAFETY: between enter and leave; the references are not used after the leave.
    unsafe { region::for_each_in(p, to, to + len, visit) };
    if !clear {
        region::leave();
        inc(&p.counters.ev_deferred, 1);
        return false;
    }
    let mut moved: Vec<(&'static RegionInner, usize, usize)> = Vec::new();
    let mut ok = true;
    let visit = |r: &'static RegionInner| {
        let (a, b) = (r.start.max(from), (r.start + r.len).min(end));
        if a < b && r.adopted {
            moved.push((r, (a - r.start) / PAGE_SIZE, (b - a) / PAGE_SIZE));
        }
    };
    // SAFETY: between enter and leave; the references are not used after the leave.
    unsafe { region::for_each_in(p, from, end, visit) };
    // Claim every page first (all or nothing), so no other thread changes them mid-move.
    let mut claimed: Vec<(&'static RegionInner, usize, Vec<PageWord>)> = Vec::new();
    'outer: for &(r, i0, m) in &moved {
        let mut old = Vec::with_capacity(m);
        for i in 0..m {
            let w = r.word(i0 + i).load(Ordering::Acquire);
            let mine = !w.is_busy()
                && r.word(i0 + i).compare_exchange(w, PageWord::BUSY, Ordering::AcqRel, Ordering::Relaxed).is_ok();
            if !mine {
                for (j, &o) in old.iter().enumerate() {
                    r.word(i0 + j).store(o, Ordering::Release);
                }
                ok = false;
                break 'outer;
            }
            old.push(w);
        }
        claimed.push((r, i0, old));
    }
    if !ok {
        for (r, i0, old) in claimed {
            for (j, &o) in old.iter().enumerate() {
                r.word(i0 + j).store(o, Ordering::Release);
            }
        }
        region::leave();
        inc(&p.counters.ev_deferred, 1);
        return false;
    }
    let mut created: Vec<(&'static RegionInner, Vec<PageWord>)> = Vec::new();
    for (r, i0, old) in claimed {
        let m = old.len();
        let old_addr = r.addr(i0);
        let new_start = to + (old_addr - from);
        let fo = r.folio_order;
        let fp = 1usize << fo;
        let aligned = fo > 0 && i0 % fp == 0 && m % fp == 0;
        let order = if aligned { fo } else { 0 };
        let mut words = old.clone();
        if !aligned {
            to_order0(p, new_start, &mut words);
        }
        match region::publish_adopted(p, new_start, m * PAGE_SIZE, order) {
            Ok(nr) => {
                for (i, &w) in words.iter().enumerate() {
                    nr.word(i).store(w, Ordering::Release);
                    if w.kind() == kind::UNMAPPED {
                        nr.unmapped.fetch_add(1, Ordering::Relaxed);
                    }
                    nr.shadow(i).store(r.shadow(i0 + i).load(Ordering::Relaxed), Ordering::Relaxed);
                }
                created.push((nr, words));
            }
            Err(_) => {
                // No registry slot: the moved pages cannot be followed. Their entries are
                // freed and the new range becomes unmanaged memory (zero-fill for what was
                // swapped out would lose data, so map the swapped pages back first).
                fault_back(p, new_start, &words);
            }
        }
        for i in 0..m {
            r.mark_unmapped(i0 + i);
        }
        inc(&p.counters.remap_moved_pages, m as u64);
    }
    // Queue the moved folios on their lists under their new region.
    for (nr, words) in &created {
        for (i, &w) in words.iter().enumerate() {
            let k = w.order();
            if i % (1usize << k) != 0 {
                continue;
            }
            match w.kind() {
                kind::RESIDENT | kind::CLEAN => push_active(p, nr, i, k),
                kind::CACHED if !p.lru.inactive.push(crate::reclaim::entry(nr, i, k)) => {
                    inc(&p.counters.reclaim_fail, 1);
                }
                _ => {}
            }
        }
    }
    region::leave();
    true
}

/// Rewrite moved page words as 4 KiB ones (the move broke folio alignment): mapped and
/// swapped pages keep their entries (a 4 KiB swap-in of a larger stored folio reads its part);
/// cached folios are stored page by page (a cache object is one aligned folio), and a page the
/// store refuses is mapped back at its new address `start + i * 4096` (resident), never
/// dropped.
fn to_order0(p: &Pager, start: usize, words: &mut [PageWord]) {
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        match w.kind() {
            kind::RESIDENT => words[i] = PageWord::resident(0),
            kind::SWAPPED => words[i] = PageWord::swapped(0, w.payload()),
            kind::CLEAN => {
                words[i] = PageWord::clean(0, w.clean_entry(), 0);
            }
            kind::CACHED => {
                let k = w.order();
                let n = 1usize << k;
                // The folio's pages are consecutive words with this same value.
                let o = region::cached_obj(w, k);
                let mut kept = [PageWord::NONE; 512];
                crate::reclaim::clean_tags(p, o, n, &mut kept);
                crate::reclaim::clear_clean_tags(p, o, n);
                let mut j = 0;
                while j < n && i + j < words.len() && words[i + j] == w {
                    words[i + j] = if kept[j] != PageWord::NONE {
                        PageWord::swapped(0, kept[j].payload())
                    } else {
                        // SAFETY: page j of the cache object (claimed: its words are BUSY).
                        let d = unsafe { std::slice::from_raw_parts(p.cache.ptr(o).add(j * PAGE_SIZE), PAGE_SIZE) };
                        let mut nw = [PageWord::NONE; 1];
                        if crate::reclaim::store_folio(p, d, 0, &mut nw).is_ok() {
                            nw[0]
                        } else {
                            crate::reclaim::store_failed(p);
                            // SAFETY: the cache page is readable; the page at its new address
                            // is missing (a cached page is unmapped) and claimed (moving).
                            let _ =
                                unsafe { p.uffd.copy(start + (i + j) * PAGE_SIZE, d.as_ptr(), PAGE_SIZE, false, true) };
                            p.charge.resident_pages.fetch_add(1, Ordering::AcqRel);
                            PageWord::resident(0)
                        }
                    };
                    j += 1;
                }
                p.cache.free(o);
                i += j.max(1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
}

/// The moved pages could not get a region: put what was swapped out back into memory at its
/// new address and free its entries (the range is then unmanaged, never silently zeroed).
fn fault_back(p: &Pager, start: usize, words: &[PageWord]) {
    let mut bi = p.bufs.take();
    let buf = &mut bi[..PAGE_SIZE];
    for (i, &w) in words.iter().enumerate() {
        let entry = match w.kind() {
            kind::SWAPPED => Some(w.payload()),
            kind::CLEAN => Some(w.clean_entry()),
            _ => None,
        };
        let Some(e) = entry else { continue };
        if w.kind() == kind::SWAPPED && p.store.load(e, buf).is_ok() {
            // SAFETY: buf holds one page; the destination is missing in the moved mapping.
            let _ = unsafe { p.uffd.copy(start + i * PAGE_SIZE, buf.as_ptr(), PAGE_SIZE, false, true) };
        }
        p.store.put(e, 1);
    }
    drop(bi);
    let _ = p.uffd.unregister(start, words.len() * PAGE_SIZE);
}

/// Retire adopted regions whose pages are all unmapped. Call on a pager thread or an API
/// caller, never on the event thread, and not inside [`region::enter`].
pub(crate) fn reap(p: &Pager) -> usize {
    p.sync_events();
    let g = p.vma_lock.lock();
    let mut dead = Vec::new();
    for r in region::adopted_of(p) {
        // SAFETY: adopted regions are unpublished only under vma_lock (held).
        if unsafe { &*r }.all_unmapped() {
            // SAFETY: as above, once.
            unsafe { region::unpublish(r) };
            dead.push(r);
        }
    }
    drop(g);
    // Freeing waits for threads inside enter(), which may wait for the event thread, which may
    // wait for vma_lock: so outside it.
    for &r in &dead {
        // SAFETY: unpublished above, freed once; not inside enter().
        unsafe { crate::reclaim::free_unpublished(r) };
    }
    inc(&p.counters.retired_regions, dead.len() as u64);
    dead.len()
}

/// Retire every adopted region (the pager is going away).
pub(crate) fn retire_all(p: &Pager) {
    let g = p.vma_lock.lock();
    let all = region::adopted_of(p);
    for &r in &all {
        // SAFETY: as in reap.
        unsafe { region::unpublish(r) };
    }
    drop(g);
    for r in all {
        // SAFETY: as in reap.
        unsafe { crate::reclaim::free_unpublished(r) };
    }
}

/// Runs of pages of `p`'s regions that are still registered (not unmapped): for a fork child
/// to register them again on its own uffd.
pub(crate) fn registered_runs(p: &Pager, mut f: impl FnMut(usize, usize)) {
    region::enter();
    let visit = |r: &'static RegionInner| {
        region::runs(r.npages, &|i| r.word(i).load(Ordering::Acquire).kind() != kind::UNMAPPED, |i, j| {
            f(r.addr(i), (j - i) * PAGE_SIZE);
            true
        });
    };
    // SAFETY: between enter and leave; the references are not used after the leave.
    unsafe { region::for_each_of(p, visit) };
    region::leave();
}
