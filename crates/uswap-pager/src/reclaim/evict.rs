//! The eviction pipeline: taking candidate folios off the mapped set in a batch
//! ([`evict_resident`]), in named phases, each block with a destination ([`Dest`]): select
//! (claim the pages `BUSY_COPY`, split into aligned blocks), write-protect, copy out (to the
//! swap cache or the store), gate, drop (one batched `MADV_DONTNEED`), publish. After the
//! kernel's `shrink_folio_list` in `mm/vmscan.c`.
//!
//! - A write to a folio being evicted hits the write protection, and the faulting thread
//!   waits until the folio has left (then it refaults it); so no write is lost. Until the
//!   batch's `DONTNEED` is done the pages stay `BUSY`, and only then is their new state
//!   published.
//! - A **clean** folio (swapped in by a read, still write-protected, its swap entry kept) is
//!   evicted with no write-protect call and no copy: the batch's `DONTNEED` drops it and its
//!   words go back to `SWAPPED` with the kept entries. A `mincore` first checks that the
//!   program has not dropped it itself (then it becomes zero-fill, not the stale entry).
//! - If the store fails, the eviction is undone: write protection is removed and the folio
//!   stays resident.
//!
//! Of the pager: its lists and workingset (`lru`), the event thread's progress and read gate
//! (`ev`), the uffd, the store, the swap cache, the batch and bounce-buffer pools, the
//! configuration, the counters, the resident page count (`charge`) and the stop flag.
//!
//! Locking: pages are claimed by CAS to `BUSY` (see [`crate::region`]); the batch is taken
//! from the [`BatchPool`](super::batch::BatchPool). In thread fault mode without REMOVE
//! events the drop holds the event thread's read gate (`ev.read_gate`) ([`gate_or_abort`]), never while waiting for
//! anything. A copy to the store takes a bounce buffer: waited for in thread fault mode; in
//! SIGBUS mode only for an adopted region, and only if one is free. Nothing here allocates.

use crate::page::{clean_payload, kind, PageWord};
use crate::region::{self, RegionInner};
use crate::stats::inc;
use crate::{Pager, PAGE_SIZE};
use std::sync::atomic::Ordering;

use super::batch::{Batch, Block, Dest, MAX_BLOCKS};
use super::lru::{blocks, entry};
use super::swap::{clean_tags, clear_clean_tags, release_words, store_failed, store_folio, TAG_CLEAN};
use super::workingset::inactive_window;

/// A candidate from a list: `(region, page, order, any_order)`; a `None` region is a stale
/// entry, skipped.
pub(super) type Candidate = (Option<&'static RegionInner>, usize, u32, bool);

/// Evict candidate folios taken by `next`: write-protect, copy to the cache (`to_cache`) or
/// the store, drop, publish; with the next candidates again, up to [`EVICT_TRIES`] batches,
/// while a batch evicts nothing. `shadows`: leave workingset shadows on pages that go straight
/// to the store. Returns pages taken off the resident set.
///
/// The phases, in order: [`select`] (claim, split into blocks, choose each block's [`Dest`]),
/// [`write_protect`], [`copy_out`], [`gate_or_abort`] (thread fault mode: hold the read gate
/// or give the batch up), [`drop_pages`] (one `MADV_DONTNEED` for the batch), [`publish`].
pub(super) fn evict_resident(
    p: &Pager,
    to_cache: bool,
    shadows: bool,
    max_pages: usize,
    next: &mut dyn FnMut() -> Option<Candidate>,
) -> usize {
    let Some(mut guard) = p.batches.take() else {
        return 0;
    };
    for _ in 0..EVICT_TRIES {
        let b = guard.get();
        select(p, b, to_cache, max_pages, next);
        if b.nblocks == 0 {
            return 0;
        }
        write_protect(p, b);
        copy_out(p, b, to_cache);
        let mut gate = gate_or_abort(p, b);
        drop_pages(p, b, &mut gate);
        let out = publish(p, b, shadows);
        drop(gate);
        if out > 0 {
            return out;
        }
        guard.clear();
    }
    0
}

/// Batches [`evict_resident`] fills before it reports no progress. A batch can evict nothing
/// although it had folios: the program wrote them while they were being evicted (each write
/// takes its folio back, to the list's young end: the next candidates are older), or an event
/// in flight gave the batch up. Reporting no progress after one such batch would make the
/// background reclaimer count itself stuck, and faults stop waiting for it, mapping folios
/// over the limit meanwhile.
const EVICT_TRIES: usize = 4;

/// Phase 1, select: take candidates from `next` until the batch holds `max_pages` pages (or
/// its blocks are nearly used up), claim their mapped pages (`BUSY_COPY`), split the claimed
/// pages into aligned blocks and choose each block's destination: [`Dest::Store`] (the copy
/// phase may turn it into [`Dest::Cache`]), or for an all-clean block [`Dest::CleanKept`]
/// (entries kept; `clean` + `Store` when it goes to the swap cache) or
/// [`Dest::CleanDropped`] (the program dropped it: entries freed now). A mixed block is
/// evicted like a resident one: its clean pages' entries are freed now.
fn select(p: &Pager, b: &mut Batch, to_cache: bool, max_pages: usize, next: &mut dyn FnMut() -> Option<Candidate>) {
    let mut pages = 0usize;
    while pages < max_pages && b.nblocks < MAX_BLOCKS - 16 {
        let Some((r, page, order, any)) = next() else { break };
        let Some(r) = r else { continue };
        if page >= r.npages || order > 9 {
            continue;
        }
        if claim_resident(r, page, order, any, &mut b.claimed) == 0 {
            continue;
        }
        let n = (1usize << order).min(r.npages - page);
        blocks(page, n, &|i| b.claimed[i] != PageWord::NONE, |pg, k| {
            let old = &b.claimed[pg - page..pg - page + (1 << k)];
            let mut dest = Dest::Store;
            let mut clean = false;
            if old.iter().all(|&w| w.kind() == kind::CLEAN) {
                // Unchanged since swap-in (still write-protected): the store has it. Going to
                // the inactive list, it is copied to the swap cache like any folio (a hot clean
                // page gets its second chance there too) and keeps its entries.
                dest = if !clean_present(r.addr(pg), 1 << k, &mut b.mincore) {
                    Dest::CleanDropped
                } else if to_cache {
                    clean = true;
                    Dest::Store
                } else {
                    Dest::CleanKept
                };
                for (i, &w) in old.iter().enumerate() {
                    b.words[b.nwords + i] = if dest != Dest::CleanDropped {
                        w.clean_to_swapped()
                    } else {
                        p.store.put(w.clean_entry(), 1);
                        PageWord::NONE
                    };
                }
            } else {
                // Evicted like a RESIDENT block (its write protection is set again, harmlessly).
                for &w in old.iter().filter(|&&w| w.kind() == kind::CLEAN) {
                    p.store.put(w.clean_entry(), 1);
                }
            }
            b.blocks[b.nblocks] = Block { r, page: pg, order: k, w: b.nwords, dest, clean, wanted: false };
            b.nblocks += 1;
            b.nwords += 1 << k;
            pages += 1 << k;
        });
    }
}

/// Claim the mapped (RESIDENT or CLEAN) pages of `[page, page + 2^order)` (any order when
/// `any_order`); `claimed[i]` gets page `page + i`'s word before the claim, 0 if not claimed.
fn claim_resident(r: &RegionInner, page: usize, order: u32, any_order: bool, claimed: &mut [PageWord]) -> usize {
    let n = (1usize << order).min(r.npages - page);
    let mut c = 0;
    for i in 0..n {
        claimed[i] = PageWord::NONE;
        let w = r.word(page + i).load(Ordering::Acquire);
        if w.is_mapped()
            && (any_order || w.order() == order)
            && r.word(page + i).compare_exchange(w, PageWord::BUSY_COPY, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            claimed[i] = w;
            c += 1;
        }
    }
    c
}

/// Of the CLEAN pages `[a, a + len)` (claimed, so still mapped write-protected unless the
/// program dropped them), are all still present? A page the program dropped with
/// `MADV_DONTNEED` reads as zero now, so its kept entry is stale. (One `mincore` per block;
/// it does not fault anything in.)
fn clean_present(a: usize, pages: usize, vec: &mut [u8; 512]) -> bool {
    // SAFETY: mincore on our own page-aligned range (at most 512 pages: one block) with a
    // vector of one byte per page.
    let rc = unsafe { libc::mincore(a as *mut _, pages * PAGE_SIZE, vec.as_mut_ptr()) };
    rc == 0 && vec[..pages].iter().all(|&v| v & 1 != 0)
}

/// Phase 2, write-protect every block that will be copied (not the clean ones: protected
/// since their swap-in), merging adjacent blocks of one region into one call. A block whose
/// protection fails is [`Dest::Aborted`]. The blocks are sorted by address first: the batch
/// comes in LRU order, in which neighbours are rarely next to each other, and every call
/// costs a TLB-flush IPI to each CPU the program runs on, so fewer, longer calls are cheaper.
/// Later phases take the sorted order too (`drop_pages` merges adjacent blocks the same way).
fn write_protect(p: &Pager, b: &mut Batch) {
    b.blocks[..b.nblocks].sort_unstable_by_key(|blk| (blk.r as usize, blk.page));
    let mut i = 0;
    while i < b.nblocks {
        if b.blocks[i].dest.is_clean() || b.blocks[i].clean {
            // Clean: write-protected since its swap-in.
            i += 1;
            continue;
        }
        let r0 = b.blocks[i].r;
        let start = b.blocks[i].page;
        let mut end = start + (1 << b.blocks[i].order);
        let mut j = i + 1;
        while j < b.nblocks
            && b.blocks[j].r == r0
            && b.blocks[j].page == end
            && !b.blocks[j].dest.is_clean()
            && !b.blocks[j].clean
        {
            end += 1 << b.blocks[j].order;
            j += 1;
        }
        // SAFETY: r0 came from the registry inside enter()/leave().
        let r = unsafe { &*r0 };
        inc(&p.counters.wp_calls, 1);
        if p.uffd.writeprotect(r.addr(start), (end - start) * PAGE_SIZE, true, false).is_err() {
            for blk in &mut b.blocks[i..j] {
                blk.dest = Dest::Aborted;
            }
        }
        i = j;
    }
}

/// Phase 3, copy out each [`Dest::Store`] block: into a swap-cache object when `to_cache`
/// and there is room ([`Dest::Cache`], the words become CACHED), else into the store (the
/// words become SWAPPED), except a clean block that found no room in the cache, which is
/// dropped clean ([`Dest::CleanKept`]). A block unmapped under the copy, or that the store
/// refuses, is [`Dest::Aborted`] (after a store failure its protection is lifted).
fn copy_out(p: &Pager, b: &mut Batch, to_cache: bool) {
    for bi in 0..b.nblocks {
        let blk = b.blocks[bi];
        if !matches!(blk.dest, Dest::Store | Dest::Cache) {
            continue;
        }
        // SAFETY: the block's region came from the registry inside enter()/leave().
        let r = unsafe { &*blk.r };
        let len = PAGE_SIZE << blk.order;
        let mut done = false;
        if to_cache {
            if let Some(o) = p.cache.alloc(len) {
                // SAFETY: the cache object is ours and len bytes long.
                if !unsafe { read_pages(p, r, r.addr(blk.page), p.cache.ptr(o), len) } {
                    // Unmapped under us: the unmap event releases the pages.
                    p.cache.free(o);
                    b.blocks[bi].dest = Dest::Aborted;
                    continue;
                }
                for i in 0..1usize << blk.order {
                    let sw = b.words[blk.w + i];
                    let t = if blk.clean { TAG_CLEAN | clean_payload(sw.payload(), sw.order()) } else { 0 };
                    p.cache.tag(o, i).store(t, Ordering::Relaxed);
                }
                let cw = PageWord::cached(blk.order, (o.off / crate::arena::GRANULE) as u64);
                b.words[blk.w..blk.w + (1 << blk.order)].fill(cw);
                b.blocks[bi].dest = Dest::Cache;
                done = true;
            }
        }
        if !done && blk.clean {
            // No room in the swap cache: drop it clean (its words hold the kept entries).
            b.blocks[bi].dest = Dest::CleanKept;
        } else if !done {
            // The bounce buffer: in thread mode waited for (fills run on the event thread
            // alone, one buffer at a time); in SIGBUS mode taken only if free, since every
            // faulting thread's fill holds one and may be waiting for this block's pages.
            let mut bounce = if p.cfg.fault_mode == crate::FaultMode::Thread {
                Some(p.bufs.take())
            } else if via_kernel(p, r) {
                let Some(x) = p.bufs.try_take() else {
                    b.blocks[bi].dest = Dest::Aborted;
                    unprotect(p, &blk);
                    continue;
                };
                Some(x)
            } else {
                None
            };
            let src: &[u8] = match bounce.as_mut() {
                Some(x) => {
                    let buf = &mut x[..len];
                    // SAFETY: buf is ours and len bytes long.
                    if !unsafe { read_pages(p, r, r.addr(blk.page), buf.as_mut_ptr(), len) } {
                        // Unmapped under us: the unmap event releases the pages (the bounce
                        // buffer goes back to the pool with `bounce`).
                        b.blocks[bi].dest = Dest::Aborted;
                        continue;
                    }
                    buf
                }
                // SAFETY: the block's pages are claimed (BUSY), mapped and write-protected:
                // nobody changes them while we read (SIGBUS mode: a page the program dropped
                // faults into our handler, which sees IN_RECLAIM and maps zeros).
                None => unsafe { std::slice::from_raw_parts(r.addr(blk.page) as *const u8, len) },
            };
            let res = store_folio(p, src, blk.order, &mut b.words[blk.w..blk.w + (1 << blk.order)]);
            drop(bounce);
            if res.is_err() {
                store_failed(p);
                b.blocks[bi].dest = Dest::Aborted;
                unprotect(p, &blk);
            }
        }
    }
}

/// Whether [`read_pages`] copies page `src` of `r` through the kernel: in thread fault mode
/// always; in SIGBUS mode for an adopted region, which the program may unmap at any moment
/// (a plain copy of a range unmapped under it is a SIGSEGV in the reclaiming thread). A region
/// the pager mapped itself is unmapped only through its handle, which retires it first.
fn via_kernel(p: &Pager, r: &RegionInner) -> bool {
    p.cfg.fault_mode == crate::FaultMode::Thread || r.adopted
}

/// Copy `len` bytes of managed memory at `src` (in `r`) to `dst`. Through the kernel
/// ([`crate::sys::copy_from_self`], see [`via_kernel`]): a range the program unmapped under the
/// copy fails instead of killing the process, and a page it dropped under the copy faults and
/// is served as zeros by the event thread (thread mode), or fails the copy (SIGBUS mode: the
/// kernel does not wait for a SIGBUS-mode fault; the block is given up). Otherwise a plain
/// copy (faults come back to this thread, whose handler maps zeros).
///
/// # Safety
/// - `dst` is valid for writes of `len` bytes.
unsafe fn read_pages(p: &Pager, r: &RegionInner, src: usize, dst: *mut u8, len: usize) -> bool {
    if via_kernel(p, r) {
        // SAFETY: dst is writable (caller's obligation).
        unsafe { crate::sys::copy_from_self(src, dst, len) }
    } else {
        // SAFETY: src is a claimed, write-protected folio of a live region the pager mapped
        // (see the caller); dst is writable.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst, len) };
        true
    }
}

/// Phase 4, gate (thread fault mode without REMOVE events): hold the read gate, or give the
/// whole batch up ([`abort_all`]) when an event is pending. Returns the gate, held until the
/// drop is done.
///
/// In thread fault mode, and in SIGBUS mode for adopted regions (the program unmaps those
/// with its own `munmap`), the program's threads run while we work, and one may have unmapped
/// (or moved) a range of this batch: its UNMAP/REMAP event was read, or is pending. Its
/// address may then hold a new mapping, which our madvise must not drop. So: hold the read
/// gate (no event is read, so no munmap in progress can return), and drop only if no event
/// is pending in the kernel or deferred here; otherwise give the batch up.
fn gate_or_abort<'p>(p: &'p Pager, b: &mut Batch) -> Option<crate::sys::YieldGuard<'p>> {
    let adopted = || {
        b.blocks[..b.nblocks].iter().any(|blk| {
            // SAFETY: the block's region came from the registry inside enter()/leave().
            blk.dest != Dest::Aborted && unsafe { &*blk.r }.adopted
        })
    };
    let gated = !p.cfg.event_remove && (p.cfg.fault_mode == crate::FaultMode::Thread || adopted());
    let gate = gated.then(|| p.ev.read_gate.lock());
    if gated {
        let first = b.blocks[..b.nblocks].iter().find(|blk| blk.dest != Dest::Aborted);
        let quiet = first.is_none_or(|blk| {
            // SAFETY: the block's region came from the registry inside enter()/leave().
            let r = unsafe { &*blk.r };
            p.ev.pending.load(Ordering::SeqCst) == 0 && p.uffd.probe_quiet(r.addr(blk.page))
        });
        if !quiet {
            // Never wait for anything with the gate held: undoing takes ioctls that wait for
            // the pending event to be read.
            drop(gate);
            abort_all(p, b);
            return None;
        }
    }
    gate
}

/// Give a whole batch up (after [`copy_out`]): every block goes back to resident
/// ([`Dest::Aborted`]): free what the copy made of it and the swap entries a clean block had
/// kept, and lift the write protection of each block not already aborted.
fn abort_all(p: &Pager, b: &mut Batch) {
    inc(&p.counters.reclaim_aborted, 1);
    for bi in 0..b.nblocks {
        if b.blocks[bi].dest != Dest::Aborted {
            give_up(p, b, bi);
            unprotect(p, &b.blocks[bi]);
        }
    }
}

/// Lift the write protection of a block given up, waking the writers that wait on it.
fn unprotect(p: &Pager, blk: &Block) {
    // SAFETY: the block's region came from the registry inside enter()/leave().
    let r = unsafe { &*blk.r };
    let _ = p.uffd.writeprotect(r.addr(blk.page), PAGE_SIZE << blk.order, false, true);
}

/// Give block `bi` up (it goes back to RESIDENT in [`publish`]): free what the copy made of
/// it, and the swap entries a clean block had kept (no word refers to them any more). The
/// caller lifts its write protection.
fn give_up(p: &Pager, b: &mut Batch, bi: usize) {
    let blk = b.blocks[bi];
    let n = 1usize << blk.order;
    match blk.dest {
        Dest::Store | Dest::CleanKept => release_words(p, &b.words[blk.w..blk.w + n]),
        Dest::Cache => {
            let o = region::cached_obj(b.words[blk.w], blk.order);
            clean_tags(p, o, n, &mut b.kept);
            clear_clean_tags(p, o, n);
            release_words(p, &b.kept[..n]);
            p.cache.free(o);
        }
        Dest::Aborted | Dest::CleanDropped => {}
    }
    b.blocks[bi].dest = Dest::Aborted;
}

/// Phase 5, drop the pages of every block not aborted with one batched `MADV_DONTNEED`
/// (adjacent blocks merged into one range). The pages are marked `BUSY_DROP` first: from here
/// on a REMOVE event on them is our own madvise's, and a fault on them waits for
/// [`publish`]. Releases `gate` right after the madvise; with REMOVE events on, waits until
/// the event thread has processed the events our madvise raised.
fn drop_pages(p: &Pager, b: &mut Batch, gate: &mut Option<crate::sys::YieldGuard<'_>>) {
    let mut wanted = false;
    for bi in 0..b.nblocks {
        let blk = b.blocks[bi];
        if blk.dest == Dest::Aborted {
            continue;
        }
        // SAFETY: the block's region came from the registry inside enter()/leave().
        let r = unsafe { &*blk.r };
        // By CAS: a page the event thread has turned BUSY_WANTED (a write let through, see
        // `fault::resolve`) gives the whole block up; the pages already marked BUSY_DROP go
        // back to RESIDENT with it in `publish`.
        let dropping = (0..1usize << blk.order).all(|i| {
            r.word(blk.page + i)
                .compare_exchange(PageWord::BUSY_COPY, PageWord::BUSY_DROP, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        });
        if !dropping {
            give_up(p, b, bi);
            b.blocks[bi].wanted = true;
            wanted = true;
        }
    }
    let iov = &mut b.iov;
    let mut niov = 0;
    for blk in &b.blocks[..b.nblocks] {
        if blk.dest == Dest::Aborted {
            continue;
        }
        // SAFETY: as above.
        let r = unsafe { &*blk.r };
        let a = r.addr(blk.page);
        let len = PAGE_SIZE << blk.order;
        if niov > 0 && iov[niov - 1].iov_base as usize + iov[niov - 1].iov_len == a {
            iov[niov - 1].iov_len += len;
        } else {
            iov[niov] = libc::iovec { iov_base: a as *mut _, iov_len: len };
            niov += 1;
        }
    }
    if niov > 0 {
        // One `process_madvise` per 1024 ranges (the engine's batcher, raw system calls).
        // SAFETY: page-aligned ranges of managed (private anonymous) memory of this process,
        // claimed and copied out (or kept clean) by this batch: nothing holds a reference into
        // them, and the program's next touch faults and is served from the swap entry.
        let calls = unsafe { uswap::tier::pages::dontneed(&iov[..niov]) };
        inc(&p.counters.madvise_calls, calls);
        *gate = None;
        if p.cfg.event_remove {
            // Our madvise raised REMOVE events, acknowledged by the event thread's read() but
            // maybe not yet processed: wait until they are, while our pages are still BUSY
            // (which the event thread skips), so they cannot release what we publish next.
            let target = p.ev.reads.load(Ordering::SeqCst);
            while p.ev.done.load(Ordering::SeqCst) < target && !p.stop.load(Ordering::Relaxed) {
                std::thread::yield_now();
            }
        }
    }
    if wanted {
        // Lift the protection of the blocks given up, with the read gate released (the ioctl
        // retries on EAGAIN until the event thread has read the pending event) and waking the
        // writers that wait on their other pages.
        *gate = None;
        for blk in b.blocks[..b.nblocks].iter().filter(|blk| blk.wanted) {
            unprotect(p, blk);
        }
    }
}

/// Phase 6, publish: store each block's new words (an aborted block becomes RESIDENT again
/// and goes back on the active list), advance the workingset clock, leave shadows (with
/// `shadows`), queue demoted blocks on the inactive list, count, and take the evicted pages
/// off the resident count. Returns those pages.
fn publish(p: &Pager, b: &Batch, shadows: bool) -> usize {
    let mut out = 0usize;
    for blk in &b.blocks[..b.nblocks] {
        // SAFETY: the block's region came from the registry inside enter()/leave().
        let r = unsafe { &*blk.r };
        let n = 1usize << blk.order;
        if blk.dest == Dest::Aborted {
            for i in 0..n {
                // A page a fault is taking back (`fault::take_back`) is published once the fault
                // path's ioctl is done (one ioctl, on the event thread or in this thread's own
                // fault, which waits for nothing of ours); by CAS, since a fault may take it
                // back again (`BUSY_HANDED` to `BUSY_WANTED`) between a load and a store.
                let word = r.word(blk.page + i);
                let mut backoff = crate::sys::Backoff::default();
                loop {
                    let w = word.load(Ordering::Acquire);
                    if w != PageWord::BUSY_WANTED
                        && word
                            .compare_exchange(w, PageWord::resident(blk.order), Ordering::AcqRel, Ordering::Relaxed)
                            .is_ok()
                    {
                        break;
                    }
                    backoff.snooze();
                }
            }
            p.lru.active.push(entry(r, blk.page, blk.order));
            continue;
        }
        for i in 0..n {
            r.word(blk.page + i).store(b.words[blk.w + i], Ordering::Release);
        }
        // The workingset clock counts the pages that leave the active list; every page that
        // leaves gets the clock as its shadow, so that its refault distance says whether it
        // comes back hot (`refault_is_hot`).
        let t = p.lru.ws.tick(n as u64);
        if matches!(blk.dest, Dest::Store | Dest::CleanKept | Dest::Cache) {
            for i in 0..n {
                r.shadow(blk.page + i).store(t, Ordering::Relaxed);
            }
        }
        if shadows && matches!(blk.dest, Dest::Store | Dest::CleanKept) {
            // Straight to the store with the inactive list bypassed: count the pages as if
            // demoted (their shadows measure whether the inactive list should come back).
            p.lru.ws.demoted(n as u64, inactive_window(p));
        }
        match blk.dest {
            Dest::CleanKept => inc(&p.counters.clean_evicted, n as u64),
            Dest::CleanDropped => inc(&p.counters.clean_discarded, n as u64),
            Dest::Cache => {
                inc(&p.counters.demoted_pages, n as u64);
                p.lru.ws.demoted(n as u64, inactive_window(p));
                if !p.lru.inactive.push(entry(r, blk.page, blk.order)) {
                    // Inactive list full: this folio stays cached until it refaults or its
                    // region goes; count it as a reclaim failure.
                    inc(&p.counters.reclaim_fail, 1);
                }
            }
            Dest::Store | Dest::Aborted => {}
        }
        out += n;
    }
    p.charge.resident_pages.fetch_sub(out as i64, Ordering::AcqRel);
    out
}
