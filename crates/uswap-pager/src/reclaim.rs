//! Reclaim: keeping a pager's charge (resident pages + swap cache + compressed pool) under its
//! limit, with kernel-style active and inactive lists.
//!
//! - The **active list** ([`Ring`] `active`) holds folios in the order they were mapped.
//!   Shrinking it takes the oldest folios, write-protects them (`UFFDIO_WRITEPROTECT`), copies
//!   them out and drops them with one `process_madvise(MADV_DONTNEED)` per batch. With the
//!   two-list policy the copy goes to the swap cache (the inactive list: unmapped but
//!   uncompressed, so a refault is a cheap `UFFDIO_COPY` that promotes the folio back); with
//!   FIFO it is compressed straight into the store.
//! - The **inactive list** is shrunk when the swap cache exceeds its share of the limit: the
//!   oldest cached folios are compressed into the store and their cache memory freed.
//! - A **clean** folio (swapped in by a read, still write-protected, its swap entry kept) is
//!   evicted with no write-protect call and no copy: the batch's `DONTNEED` drops it and its
//!   words go back to `SWAPPED` with the kept entries. A `mincore` first checks that the
//!   program has not dropped it itself (then it becomes zero-fill, not the stale entry).
//! - A write to a folio being evicted hits the write protection, and the faulting thread waits
//!   until the folio has left (then it refaults it); so no write is lost. Until the batch's
//!   `DONTNEED` is done the pages stay `BUSY`, and only then is their new state published.
//! - If the store has no contiguous range for a large folio (`NoSpace`), the folio is split in
//!   halves and retried (`swpout_fallback`). If the store fails, the eviction is undone: write
//!   protection is removed and the folio stays resident.
//! - Eviction ([`evict_resident`]) runs as named phases over a batch of blocks, each with a
//!   destination ([`Dest`]): select, write-protect, copy out, gate, drop, publish.
//! - The batch (~34 KiB of blocks, words and scratch arrays) lives in a fixed pool in the
//!   pager ([`BatchPool`], 8 batches in `MAP_NORESERVE` memory), not on the stack: reclaim
//!   runs on the faulting thread, in SIGBUS mode inside the handler on the program's own
//!   stack, which may be small (and a fault taken inside reclaim nests a second one). A pool
//!   rather than a per-thread buffer: thread-locals that large would cost every program
//!   thread their memory and may be allocated lazily (on the fault path); a pool is reserved
//!   once and taken with one CAS.
//! - **Releasing** pages ([`release_pages`]) frees their swap entries and cache copies; a
//!   region is retired ([`retire_region`]) by taking it out of the registry, waiting until no
//!   thread is inside it, and releasing all its pages.
//!
//! Locking: each ring is a preallocated circular buffer behind a tiny spinlock that is never
//! held across anything but the push/pop itself (so a signal handler cannot deadlock on it);
//! pages are claimed by CAS to `BUSY` (see [`crate::region`]). Nothing here allocates.
//! An eviction batch is taken from the [`BatchPool`] by CAS on a bit mask and returned on
//! drop; when all are in use an outermost reclaim waits for one (it holds no page or lock
//! then), and a reclaim nested in a fault inside this thread's own reclaim evicts nothing
//! instead (its outer level may hold the batch it would wait for).
//! Retiring a region waits for every thread inside the registry ([`region::enter`]), so it is
//! called with no lock held that such a thread may wait for.

use crate::page::{clean_payload, kind, PageWord};
use crate::region::{self, RegionInner};
use crate::slots::Slots;
use crate::stats::inc;
use crate::store::StoreError;
use crate::{Pager, Replacement, PAGE_SIZE};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Most pages one reclaim batch handles.
pub(crate) const MAX_BATCH_PAGES: usize = 1024;
const MAX_BLOCKS: usize = 256;

thread_local! {
    /// Depth of reclaim on this thread (a fault taken inside our own reclaim must not wait
    /// for pages this thread holds).
    pub(crate) static IN_RECLAIM: Cell<u32> = const { Cell::new(0) };
}

/// Workingset detection for the two-list policy: how many demoted pages come back while the
/// inactive list would still hold them. When almost none do (a streaming or uniformly random
/// workload), the inactive stage only costs a copy and a minor fault, so reclaim bypasses it,
/// evicting active folios straight to the store like FIFO.
///
/// While bypassed, it keeps measuring the way the kernel's `mm/workingset.c` does, with
/// shadows instead of samples: each page evicted straight to the store gets the reclaim
/// clock (pages that left the active list so far) as its shadow ([`RegionInner::shadow`]); when it is swapped
/// back in, a refault distance (clock now − shadow) within the inactive list's size means the
/// inactive list would have turned that major fault into a cheap refault: a hit, as a real
/// one from the swap cache is.
#[derive(Default)]
pub(crate) struct Workingset {
    demoted: std::sync::atomic::AtomicU64,
    hits: std::sync::atomic::AtomicU64,
    clock: std::sync::atomic::AtomicU64,
    bypass: AtomicBool,
}

impl Workingset {
    /// Refaults the inactive list served (or would have): one per fault, however large the
    /// folio, since what it saves is a major fault.
    pub(crate) fn hit(&self, n: u64) {
        self.hits.fetch_add(n, Ordering::Relaxed);
    }
    /// Page `pg` of `r` was just swapped in from the store: a hit if its refault distance is
    /// within the inactive list (`window` pages). Clears its shadow.
    pub(crate) fn refault(&self, r: &RegionInner, pg: usize, window: u64) {
        if self.distance(r.shadow(pg).swap(0, Ordering::Relaxed)).is_some_and(|d| d <= window) {
            self.hit(1);
        }
    }
    /// Pages evicted since the page with `shadow` left (None for no shadow).
    fn distance(&self, shadow: u32) -> Option<u64> {
        (shadow != 0).then(|| u64::from((self.clock.load(Ordering::Relaxed) as u32).wrapping_sub(shadow)))
    }
    /// Advance the clock by `n` evicted pages; returns the stamp for their shadows (never 0).
    fn tick(&self, n: u64) -> u32 {
        ((self.clock.fetch_add(n, Ordering::Relaxed) + n) as u32).max(1)
    }
    /// Pages demoted into the swap cache; re-decides the bypass once per `window` pages.
    fn demoted(&self, n: u64, window: u64) {
        let d = self.demoted.fetch_add(n, Ordering::Relaxed) + n;
        if d >= window {
            let h = self.hits.swap(0, Ordering::Relaxed);
            self.demoted.store(0, Ordering::Relaxed);
            // A demotion costs a copy (~0.5 µs a page here); a refault it turns from major to
            // minor saves a swap-in (decompression, and for a written page the compression of
            // its next eviction: ~4 µs). Under one refault per 8 demoted pages the inactive
            // list costs more than it saves.
            self.bypass.store(h * 8 < d, Ordering::Relaxed);
        }
    }
    /// True while the inactive stage is bypassed.
    pub(crate) fn bypassed(&self) -> bool {
        self.bypass.load(Ordering::Relaxed)
    }
}

/// The protected list: mapped folios that came back soon after they were evicted.
///
/// The kernel keeps a hot page mapped because reclaim sees its accessed bit and rotates it;
/// user space sees no accessed bits (idle page tracking needs root and a kernel option), so
/// the active list is a FIFO by mapping order and every folio reaches its tail after one
/// pass, however often it is used. What user space does see is a page's refault distance:
/// the pages evicted between its eviction and its return ([`Workingset`]'s clock against
/// the page's shadow). A folio whose distance is under a quarter of the resident pages was
/// used again soon after it left: it is mapped here instead of onto the active list
/// (`workingset_activate`). Reclaim takes folios from the active list (from here only when
/// that is empty); while this list holds more than [`PROTECT_TARGET_PERCENT`] of the resident
/// pages, its oldest folios move to the active list's tail (`pgdeactivate`), a second pass
/// before they can be evicted. Redis under GETs of uniformly random keys is the case: its
/// dictionary entries, keys and object headers take a few pages touched on every request,
/// among values touched once in a long while.
pub(crate) struct Protect {
    ring: Ring,
    /// Pages of the folios queued (stale entries included until popped).
    pages: std::sync::atomic::AtomicI64,
}

impl Protect {
    /// A list of `cap` entries.
    pub(crate) fn new(cap: usize) -> std::io::Result<Protect> {
        Ok(Protect { ring: Ring::new(cap)?, pages: Default::default() })
    }

    /// Queue folio `e` (an [`entry`]); false when full.
    pub(crate) fn push(&self, e: u64) -> bool {
        let ok = self.ring.push(e);
        if ok {
            self.pages.fetch_add(1 << decode(e).3, Ordering::Relaxed);
        }
        ok
    }

    /// Take the oldest folio.
    pub(crate) fn pop(&self) -> Option<u64> {
        let e = self.ring.pop()?;
        self.pages.fetch_sub(1 << decode(e).3, Ordering::Relaxed);
        Some(e)
    }

    /// Pages queued.
    pub(crate) fn pages(&self) -> u64 {
        self.pages.load(Ordering::Relaxed).max(0) as u64
    }
}

/// Most refault distance of a hot page, in percent of the resident pages.
const PROTECT_WINDOW_PERCENT: u64 = 25;
/// Most pages the protected list keeps, in percent of the resident pages. Redis under random
/// GETs at 3x its limit (`uswap bench redis`'s case; GETs per second, two rounds each, one
/// session, 2026-11-25): no protected list 13.3 k / 14.3 k; window 50 %, target 50 %:
/// 17.0 k / 17.1 k; window 100 %: 15.2 k / 16.1 k; window 200 %: 16.1 k / 16.0 k; target 70 %:
/// 19.2 k / 20.9 k; target 85 %: 18.3 k / 20.4 k; window 30 %, target 70 %: 19.6 k / 20.3 k;
/// window 25 %, target 85 %: 19.8 k / 21.8 k.
const PROTECT_TARGET_PERCENT: u64 = 80;

/// Whether page `pg` of `r`, being swapped back in, is hot: its refault distance is under
/// [`PROTECT_WINDOW_PERCENT`] of the resident pages. Reads the shadow without clearing it
/// ([`Workingset::refault`] does).
pub(crate) fn refault_is_hot(p: &Pager, r: &RegionInner, pg: usize) -> bool {
    if p.cfg.replacement != Replacement::TwoList || pg >= r.npages {
        return false;
    }
    let window = resident_percent(p, PROTECT_WINDOW_PERCENT).max(64);
    p.ws.distance(r.shadow(pg).load(Ordering::Relaxed)).is_some_and(|d| d <= window)
}

/// `percent` % of the pages resident now.
fn resident_percent(p: &Pager, percent: u64) -> u64 {
    p.resident_pages.load(Ordering::Relaxed).max(0) as u64 * percent / 100
}

/// Queue a folio just mapped: on the protected list when `hot` (and the two-list policy is
/// on), else on the active list.
pub(crate) fn queue_mapped(p: &Pager, r: &RegionInner, page: usize, order: u32, hot: bool) {
    let e = entry(r, page, order);
    if hot && p.protected.push(e) {
        inc(&p.counters.workingset_activate, 1u64 << order);
    } else {
        p.active.push(e);
    }
}

/// Keep the protected list at most [`PROTECT_TARGET_PERCENT`] of the resident pages: move its
/// oldest folios to the active list's tail, at most `max_pages` pages.
fn balance_protected(p: &Pager, max_pages: usize) {
    let target = resident_percent(p, PROTECT_TARGET_PERCENT);
    let mut moved = 0usize;
    while moved < max_pages && p.protected.pages() > target {
        let Some(e) = p.protected.pop() else { break };
        let n = 1usize << decode(e).3;
        if !p.active.push(e) {
            p.protected.push(e);
            break;
        }
        inc(&p.counters.pgdeactivate, n as u64);
        moved += n;
    }
}

/// A bounded FIFO of folio references, preallocated. Its buffer is sized for the worst case
/// (twice the limit's pages, plus a million: 16 MiB for a 68 MiB limit) and `MAP_NORESERVE`,
/// so it costs only the pages its entries use: a page the consumer has left with no live
/// entry in it is given back ([`Ring::pop`]). Without that, the indices' walk round the
/// buffer touched all of it: the three rings held up to 48 MiB of RSS after a few million
/// evictions, which the preload counted as the program's memory outside the pager (`xz -9`
/// under `--limit 68M` kept 20 MiB resident; BENCHMARKS.md, 2026-11-25, sixteenth session).
pub(crate) struct Ring {
    /// `mask + 1` entries (accessed under the spinlock).
    buf: crate::own::Mapping,
    mask: usize,
    head: AtomicUsize,
    tail: AtomicUsize,
    lock: AtomicBool,
}

impl Ring {
    /// A ring of `cap` entries (a power of two).
    pub(crate) fn new(cap: usize) -> std::io::Result<Ring> {
        let cap = cap.next_power_of_two();
        Ok(Ring {
            buf: crate::own::Mapping::new(cap * 8)?,
            mask: cap - 1,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            lock: AtomicBool::new(false),
        })
    }

    fn lock(&self) {
        while self.lock.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::hint::spin_loop();
        }
    }
    fn unlock(&self) {
        self.lock.store(false, Ordering::Release);
    }

    /// Append; false when full.
    pub(crate) fn push(&self, e: u64) -> bool {
        self.lock();
        let (h, t) = (self.head.load(Ordering::Relaxed), self.tail.load(Ordering::Relaxed));
        let ok = t - h <= self.mask;
        if ok {
            self.buf.atomic_words()[t & self.mask].store(e, Ordering::Relaxed);
            self.tail.store(t + 1, Ordering::Relaxed);
        }
        self.unlock();
        ok
    }

    /// Take the oldest entry.
    pub(crate) fn pop(&self) -> Option<u64> {
        self.lock();
        let (h, t) = (self.head.load(Ordering::Relaxed), self.tail.load(Ordering::Relaxed));
        let r = if h == t {
            None
        } else {
            let e = self.buf.atomic_words()[h & self.mask].load(Ordering::Relaxed);
            self.head.store(h + 1, Ordering::Relaxed);
            // The consumer has left a page of the buffer: give it back unless the producer
            // has wrapped round into it (entries [h + 1, t) are live). Under the lock, so no
            // push lands there meanwhile; one system call per page of entries.
            const WORDS: usize = 4096 / 8;
            let cap = self.mask + 1;
            if (h + 1).is_multiple_of(WORDS) && cap >= 2 * WORDS && t - (h + 1) <= cap - WORDS {
                self.buf.discard(((h + 1 - WORDS) & self.mask) * 8, 4096);
            }
            Some(e)
        };
        self.unlock();
        r
    }

    /// Entries queued (approximate without the lock).
    pub(crate) fn len(&self) -> usize {
        self.tail.load(Ordering::Relaxed).wrapping_sub(self.head.load(Ordering::Relaxed))
    }

    /// True when empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Tag of a swap-cache page that is a clean folio's copy whose swap entries are kept (the
/// rest of the tag is the page's [`crate::page::clean_payload`]); see [`crate::arena::Arena::tag`].
const TAG_CLEAN: u64 = 1 << 63;

/// The kept swap entries of the `n` pages of cache object `o`: `out[i]` is page `i`'s SWAPPED
/// word, or 0 when the cached copy is its only copy. Returns how many pages have one.
pub(crate) fn clean_tags(p: &Pager, o: crate::arena::Obj, n: usize, out: &mut [PageWord]) -> usize {
    let mut k = 0;
    for (i, w) in out.iter_mut().enumerate().take(n) {
        let t = p.cache.tag(o, i).load(Ordering::Relaxed);
        *w = if t & TAG_CLEAN != 0 {
            k += 1;
            PageWord::new(kind::CLEAN, 0, t & !TAG_CLEAN).clean_to_swapped()
        } else {
            PageWord::NONE
        };
    }
    k
}

/// Forget the kept entries of cache object `o` (their references are the caller's now).
pub(crate) fn clear_clean_tags(p: &Pager, o: crate::arena::Obj, n: usize) {
    for i in 0..n {
        p.cache.tag(o, i).store(0, Ordering::Relaxed);
    }
}

/// Encode a folio reference: region slot and generation, first page, order.
#[inline]
pub(crate) fn entry(r: &RegionInner, page: usize, order: u32) -> u64 {
    entry_raw(r.slot, r.gen, page, order)
}

/// Encode a folio reference from its parts: slot (16 bits), generation (12,
/// [`region::GEN_MASK`]), order (4), first page (32).
#[inline]
pub(crate) fn entry_raw(slot: usize, gen: u32, page: usize, order: u32) -> u64 {
    (slot as u64 & 0xffff)
        | (u64::from(gen & region::GEN_MASK) << 16)
        | (u64::from(order & 0xf) << 28)
        | ((page as u64) << 32)
}

/// Decode a folio reference.
#[inline]
pub(crate) fn decode(e: u64) -> (usize, u32, usize, u32) {
    ((e & 0xffff) as usize, ((e >> 16) as u32) & region::GEN_MASK, (e >> 32) as usize, ((e >> 28) & 0xf) as u32)
}

/// Split the claimed pages of `[first, first + n)` (bit i of `mask` set = page claimed) into
/// naturally aligned power-of-two blocks; calls `f(page, order)` for each.
pub(crate) fn blocks(first: usize, n: usize, claimed: &dyn Fn(usize) -> bool, mut f: impl FnMut(usize, u32)) {
    let mut i = 0;
    while i < n {
        if !claimed(i) {
            i += 1;
            continue;
        }
        let mut k = (n.trailing_zeros()).min(((first + i) | (1 << 31)).trailing_zeros());
        loop {
            let len = 1usize << k;
            if i % len == 0 && i + len <= n && (i..i + len).all(claimed) {
                break;
            }
            k -= 1;
        }
        f(first + i, k);
        i += 1 << k;
    }
}

/// Where a block of an eviction batch goes. [`select`] sets the first destination; later
/// phases only change it as their comments say (the old `dest: u8` values are noted).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Dest {
    /// (0) Copied out and compressed into the store. Also the first destination of a clean
    /// folio on its way to the swap cache (`Block::clean`), until [`copy_out`] decides.
    Store,
    /// (1) Copied into the swap cache (demoted to the inactive list); set by [`copy_out`].
    Cache,
    /// (2) Eviction undone (write protection failed, the copy or the store failed, or the
    /// batch was given up): the block stays resident.
    Aborted,
    /// (3) Clean, its swap entries kept: nothing to write, only the drop.
    CleanKept,
    /// (4) Clean, but the program dropped it itself: its entries are freed and it becomes
    /// zero-fill.
    CleanDropped,
}

impl Dest {
    /// A clean block left as clean (kept or dropped): write-protected since its swap-in, and
    /// nothing to copy.
    fn is_clean(self) -> bool {
        matches!(self, Dest::CleanKept | Dest::CleanDropped)
    }
}

#[derive(Copy, Clone)]
struct Block {
    r: *const RegionInner,
    page: usize,
    order: u32,
    /// Index of the block's first new word in the words array.
    w: usize,
    /// Where the block goes.
    dest: Dest,
    /// A clean folio on its way to the swap cache (its words hold the kept SWAPPED words).
    clean: bool,
    /// Given up in [`drop_pages`] because a write wanted a page back (`BUSY_WANTED`): its
    /// write protection is lifted once the read gate is released.
    wanted: bool,
}

/// Store `data` (one folio of `order`) and write the pages' new SWAPPED words into `out`,
/// splitting on `NoSpace`.
pub(crate) fn store_folio(p: &Pager, data: &[u8], order: u32, out: &mut [PageWord]) -> Result<(), StoreError> {
    match p.store.store(p.cfg.group, data) {
        Ok(e) => {
            p.health.stored(crate::stats::now_ns);
            for (i, o) in out.iter_mut().enumerate().take(1 << order) {
                *o = PageWord::swapped(order, e + i as u64);
            }
            inc(&p.counters.swpout[order as usize], 1);
            inc(&p.counters.evicted_folios, 1);
            inc(&p.counters.evicted_pages, 1 << order);
            Ok(())
        }
        Err(StoreError::NoSpace { .. }) if order > 0 => {
            inc(&p.counters.swpout_fallback[order as usize], 1);
            let half = data.len() / 2;
            let n = 1usize << (order - 1);
            store_folio(p, &data[..half], order - 1, &mut out[..n])?;
            if let Err(e) = store_folio(p, &data[half..], order - 1, &mut out[n..2 * n]) {
                release_words(p, &out[..n]);
                return Err(e);
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Count a store that failed (its folio stays where it was) and mark the store failing
/// ([`crate::stall`]).
pub(crate) fn store_failed(p: &Pager) {
    inc(&p.counters.store_errors, 1);
    p.health.failed(crate::stats::now_ns());
}

/// Drop the store references held by SWAPPED words.
fn release_words(p: &Pager, words: &[PageWord]) {
    for &w in words {
        if w.kind() == kind::SWAPPED {
            p.store.put(w.payload(), 1);
        }
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

/// An eviction batch: the blocks taken (naturally aligned pieces of folios), their new words
/// (`words[blk.w..blk.w + 2^order]`), and the phases' scratch arrays. About 34 KiB: never on
/// a stack (it may be a program thread's, interrupted by SIGBUS), but in a [`BatchPool`].
struct Batch {
    blocks: [Block; MAX_BLOCKS],
    nblocks: usize,
    words: [PageWord; MAX_BATCH_PAGES + 512],
    nwords: usize,
    /// [`select`]: the words of one candidate's pages before the claim.
    claimed: [PageWord; 512],
    /// [`drop_pages`]: the ranges to drop.
    iov: [libc::iovec; MAX_BLOCKS],
    /// [`abort_all`]: a cached block's kept entries.
    kept: [PageWord; 512],
    /// [`clean_present`]: its `mincore` vector.
    mincore: [u8; 512],
}

/// Eviction batches in flight at once, at most (one per reclaiming thread and nesting level;
/// see [`BatchPool::take`]).
const NBATCH: usize = 8;

/// A fixed pool of [`Batch`]es in the pager's own memory (`MAP_NORESERVE`, committed on first
/// use), taken and returned by CAS on a bit mask ([`Slots`]): eviction runs on the faulting thread, maybe
/// inside its SIGBUS handler on the program's stack, so the batch must not be on that stack
/// and must not be allocated.
pub(crate) struct BatchPool {
    mem: crate::own::Mapping,
    /// Which batches are free.
    free: Slots,
}

impl BatchPool {
    /// Reserve the pool.
    pub(crate) fn new() -> std::io::Result<BatchPool> {
        let mem = crate::own::Mapping::new(NBATCH * std::mem::size_of::<Batch>())?;
        Ok(BatchPool { mem, free: Slots::new(NBATCH) })
    }

    /// Take a batch, all zero (empty). When every batch is in use, an outermost reclaim waits
    /// (spinning, then yielding) for one, holding nothing another thread waits for; a nested
    /// one (a fault taken inside this thread's own reclaim, whose outer level may hold a
    /// batch) gets `None` and evicts nothing, as waiting could then wait for itself.
    fn take(&self) -> Option<BatchGuard<'_>> {
        let mut backoff = crate::sys::Backoff::default();
        loop {
            let Some(i) = self.free.try_take() else {
                if IN_RECLAIM.with(|c| c.get()) > 1 {
                    return None;
                }
                backoff.snooze();
                continue;
            };
            // SAFETY: batch i is inside the mapping and ours until the guard returns it.
            // All-zero is a valid empty Batch (plain data; `Dest`'s first variant is 0).
            unsafe { std::ptr::write_bytes(self.batch(i), 0, 1) };
            return Some(BatchGuard { pool: self, i });
        }
    }

    /// Batch `i` (< NBATCH) of the mapping (page-aligned, so aligned for `Batch`).
    fn batch(&self, i: usize) -> *mut Batch {
        debug_assert!(i < NBATCH);
        self.mem.as_ptr().cast::<Batch>().wrapping_add(i)
    }

    /// In a fork child: every batch is free (the threads that held one do not exist there).
    pub(crate) fn reset_in_fork_child(&self) {
        self.free.reset();
    }
}

/// A batch taken from a [`BatchPool`]; returned on drop.
struct BatchGuard<'p> {
    pool: &'p BatchPool,
    i: usize,
}

impl BatchGuard<'_> {
    /// Empty the batch again (all zero), for another pass.
    fn clear(&mut self) {
        // SAFETY: as in `get`; all-zero is a valid empty Batch (see `BatchPool::take`).
        unsafe { std::ptr::write_bytes(self.pool.batch(self.i), 0, 1) };
    }

    /// The batch.
    fn get(&mut self) -> &mut Batch {
        // SAFETY: batch i is ours (taken by CAS, returned only by our drop); inside the
        // mapping; `&mut self` makes the borrow exclusive.
        unsafe { &mut *self.pool.batch(self.i) }
    }
}

impl Drop for BatchGuard<'_> {
    fn drop(&mut self) {
        self.pool.free.put(self.i);
    }
}

/// A candidate from a list: `(region, page, order, any_order)`; a `None` region is a stale
/// entry, skipped.
type Candidate = (Option<&'static RegionInner>, usize, u32, bool);

/// Evict candidate folios taken by `next`: write-protect, copy to the cache (`to_cache`) or
/// the store, drop, publish; with the next candidates again, up to [`EVICT_TRIES`] batches,
/// while a batch evicts nothing. `shadows`: leave workingset shadows on pages that go straight
/// to the store. Returns pages taken off the resident set.
///
/// The phases, in order: [`select`] (claim, split into blocks, choose each block's [`Dest`]),
/// [`write_protect`], [`copy_out`], [`gate_or_abort`] (thread fault mode: hold the read gate
/// or give the batch up), [`drop_pages`] (one `MADV_DONTNEED` for the batch), [`publish`].
fn evict_resident(
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
/// in flight gave the batch up. Reporting no progress after one such batch made the
/// reclaimer count itself stuck, and faults stopped waiting for it: python-dict, while
/// CPython fills a new table, mapped 900-2 900 folios over its limit so, one run in three
/// (2026-11-28).
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

/// Phase 2, write-protect every block that will be copied (not the clean ones: protected
/// since their swap-in), merging adjacent blocks of one region into one call. A block whose
/// protection fails is [`Dest::Aborted`]. The blocks are sorted by address first: the batch
/// comes in LRU order, in which neighbours are rarely next to each other, and every call
/// costs a TLB-flush IPI to each CPU the program runs on (a JVM under `uswap run`: 248 k calls
/// in LRU order, 108 k sorted, for the same 283 k folios). Later phases take the sorted order
/// too (`drop_pages` merges adjacent blocks the same way).
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

/// Phase 4, gate (thread fault mode without REMOVE events): hold the read gate, or give the
/// whole batch up ([`abort_all`]) when an event is pending. Returns the gate, held until the
/// drop is done.
///
/// In thread fault mode the program's threads run while we work, and one may have unmapped
/// (or moved) a range of this batch: its UNMAP/REMAP event was read, or is pending. Its
/// address may then hold a new mapping, which our madvise must not drop. So: hold the read
/// gate (no event is read, so no munmap in progress can return), and drop only if no event
/// is pending in the kernel or deferred here; otherwise give the batch up.
fn gate_or_abort<'p>(p: &'p Pager, b: &mut Batch) -> Option<crate::sys::YieldGuard<'p>> {
    let gated = p.cfg.fault_mode == crate::FaultMode::Thread && !p.cfg.event_remove;
    let gate = gated.then(|| p.read_gate.lock());
    if gated {
        let first = b.blocks[..b.nblocks].iter().find(|blk| blk.dest != Dest::Aborted);
        let quiet = first.is_none_or(|blk| {
            // SAFETY: the block's region came from the registry inside enter()/leave().
            let r = unsafe { &*blk.r };
            p.ev_pending.load(Ordering::SeqCst) == 0 && p.uffd.probe_quiet(r.addr(blk.page))
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
            let target = p.ev_reads.load(Ordering::SeqCst);
            while p.ev_done.load(Ordering::SeqCst) < target && !p.stop.load(Ordering::Relaxed) {
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
            p.active.push(entry(r, blk.page, blk.order));
            continue;
        }
        for i in 0..n {
            r.word(blk.page + i).store(b.words[blk.w + i], Ordering::Release);
        }
        // The workingset clock counts the pages that leave the active list; every page that
        // leaves gets the clock as its shadow, so that its refault distance says whether it
        // comes back hot (`refault_is_hot`).
        let t = p.ws.tick(n as u64);
        if matches!(blk.dest, Dest::Store | Dest::CleanKept | Dest::Cache) {
            for i in 0..n {
                r.shadow(blk.page + i).store(t, Ordering::Relaxed);
            }
        }
        if shadows && matches!(blk.dest, Dest::Store | Dest::CleanKept) {
            // Straight to the store with the inactive list bypassed: count the pages as if
            // demoted (their shadows measure whether the inactive list should come back).
            p.ws.demoted(n as u64, inactive_window(p));
        }
        match blk.dest {
            Dest::CleanKept => inc(&p.counters.clean_evicted, n as u64),
            Dest::CleanDropped => inc(&p.counters.clean_discarded, n as u64),
            Dest::Cache => {
                inc(&p.counters.demoted_pages, n as u64);
                p.ws.demoted(n as u64, inactive_window(p));
                if !p.inactive.push(entry(r, blk.page, blk.order)) {
                    // Inactive list full: this folio stays cached until it refaults or its
                    // region goes; count it as a reclaim failure.
                    inc(&p.counters.reclaim_fail, 1);
                }
            }
            Dest::Store | Dest::Aborted => {}
        }
        out += n;
    }
    p.resident_pages.fetch_sub(out as i64, Ordering::AcqRel);
    out
}

/// Whether [`read_pages`] copies page `src` of `r` through the kernel: in thread fault mode
/// always; in SIGBUS mode for an adopted region, which the program may unmap at any moment
/// (a plain copy of a range unmapped under it is a SIGSEGV in the reclaiming thread: a hammer
/// whose churn thread unmapped adopted mappings crashed 3 runs in 10 so). A region the pager
/// mapped itself is unmapped only through its handle, which retires it first.
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

/// A cached folio leaving the swap cache: if every page is a clean copy with its entry kept,
/// put their SWAPPED words in `words` and return true; otherwise drop whatever entries some
/// pages kept (the copy is what gets stored) and return false. Clears the tags either way.
fn keep_or_forget_clean(p: &Pager, o: crate::arena::Obj, n: usize, words: &mut [PageWord]) -> bool {
    let k = clean_tags(p, o, n, words);
    clear_clean_tags(p, o, n);
    if k == n {
        return true;
    }
    for &w in words[..n].iter().filter(|&&w| w != PageWord::NONE) {
        p.store.put(w.payload(), 1);
    }
    false
}

/// Pages the inactive list holds at its target size (the workingset window).
pub(crate) fn inactive_window(p: &Pager) -> u64 {
    (p.limit() * u64::from(p.cfg.inactive_percent) / 100 / PAGE_SIZE as u64).max(64)
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
        let Some(e) = p.inactive.pop() else { break };
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
        // Claim the whole cached piece (all pages carry the same word).
        let mut got = 0;
        while got < n
            && r.word(page + got).compare_exchange(w0, PageWord::BUSY, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            got += 1;
        }
        if got < n {
            for i in 0..got {
                r.word(page + i).store(w0, Ordering::Release);
            }
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
                p.inactive.push(e);
                break;
            }
        }
    }
    done
}

/// One reclaim step. Returns true if it made progress.
pub(crate) fn reclaim_batch(p: &Pager) -> bool {
    IN_RECLAIM.with(|c| c.set(c.get() + 1));
    inc(&p.counters.reclaim_batches, 1);
    // At most 1/64 of the limit per batch (kernel: SWAP_CLUSTER_MAX against the LRU size), so
    // a small limit is not emptied by one batch.
    let limit_pages = (p.limit() / PAGE_SIZE as u64) as usize;
    let batch = p.cfg.reclaim_batch.min(limit_pages / 64).clamp(16, MAX_BATCH_PAGES);
    let two = p.cfg.replacement == Replacement::TwoList;
    let target = p.limit() * u64::from(p.cfg.inactive_percent) / 100;
    if two {
        balance_protected(p, batch);
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
        let e = p.active.pop().or_else(|| p.protected.pop())?;
        let (slot, gen, page, order) = decode(e);
        // SAFETY: as in shrink_inactive: inside enter/leave, used only in this batch.
        let r = unsafe { region::by_slot(slot, gen) };
        // A folio holding a pager thread's thread vector stays; it goes back to the young end,
        // and a batch that meets nothing else stops.
        if let Some(reg) = r.filter(|reg| page < reg.npages) {
            if holds_pinned(reg, page, order) {
                inc(&p.counters.reclaim_pinned_skipped, 1);
                if !p.active.push(e) {
                    p.protected.push(e);
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
            if skips >= n && page < reg.npages && crate::sys::all_shared(fd, reg.addr(page), n) && p.active.push(e) {
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
    let at_floor = p.resident_pages.load(Ordering::Relaxed) <= floor;
    let bypass = !at_floor && two && p.ws.bypassed();
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
        if cache + (batch * PAGE_SIZE) as u64 > target || p.active.is_empty() {
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

/// The background reclaimer (`ReclaimMode::Background`): keeps the charge under a low
/// watermark, sleeping on a futex the fault path wakes.
pub(crate) fn kswapd(p: &Pager) {
    p.place.join();
    // The low watermark follows the limit in force (Pager::set_limit).
    let low = |limit: u64| limit - (limit / 16).max((p.cfg.reclaim_batch * PAGE_SIZE * 2) as u64).min(limit / 2);
    p.kswapd_quiet.store(false, Ordering::SeqCst);
    let mut refresh_at = 0;
    // When the current run of passes without progress began (0: the last pass made some).
    let mut failing_since = 0u64;
    let mut share = crate::pool_share::PoolShare::default();
    while !p.stop.load(Ordering::Acquire) {
        if p.pool_capped && p.cfg.pool_adapt {
            let cur = p.pool_permille.load(Ordering::Relaxed);
            if let Some(next) = share.update(crate::stats::now_ns(), p.store.tier_refaults(), cur) {
                p.set_pool_share(next);
                inc(&p.counters.pool_share_moves, 1);
            }
        }
        if p.pause.load(Ordering::SeqCst) {
            p.kswapd_quiet.store(true, Ordering::SeqCst);
            while p.pause.load(Ordering::SeqCst) && !p.stop.load(Ordering::Acquire) {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            p.kswapd_quiet.store(false, Ordering::SeqCst);
            continue;
        }
        let v = p.reclaim_wake.load(Ordering::Acquire);
        // This thread's thread vector stays pinned where glibc keeps it (`own`).
        crate::own::pin_thread_vector();
        let mut n = 0;
        // A pool far over its cap goes to the file first, coldest objects first, even under
        // the low mark, down to half as much again as its cap: the cap is the pool's share of
        // the limit, and what it holds over it is taken from the resident pages (git's
        // already-compressed pack data filled a 40M limit's pool to 10 MB against a cap of
        // 3.3 MB, and the working set thrashed in what was left). Not down to the cap itself:
        // the pool gives memory back only as whole pages empty, so a pool a little over it
        // was written back to nothing (a 16M limit's, of compressible data). Bounded like the
        // reclaim below.
        let pool_high = p.pool_cap() + p.pool_cap() / 2;
        while p.pool_capped && !p.pause.load(Ordering::SeqCst) && n < 32 && p.store.shrink_ram(pool_high, 256) > 0 {
            n += 1;
        }
        region::enter();
        // A fork waits for this thread to be quiet (`Pager::quiesce`): stop between batches,
        // not after 64 of them, or a busy machine can make the fork go ahead without us.
        while !p.pause.load(Ordering::SeqCst) && p.charged_bytes() > low(p.limit()) && n < 64 && reclaim_batch(p) {
            n += 1;
        }
        region::leave();
        // A lowered limit (a tree's share, memory outside the pager) lowers the pool's cap:
        // what the pool holds over it goes to the file, coldest first. Here, not on the
        // fault path: it does I/O.
        while p.pool_capped
            && !p.pause.load(Ordering::SeqCst)
            && p.charged_bytes() > low(p.limit())
            && n < 128
            && p.store.shrink_ram(p.pool_cap(), 256) > 0
        {
            n += 1;
        }
        // Once a second: take back the swap-file clusters that processes sharing the file
        // since a fork gave up (`ShareStep::Refresh`; it reads /proc). Here, paused by a fork
        // like every store of this thread.
        let now = crate::stats::now_ns();
        if now >= refresh_at && !p.pause.load(Ordering::SeqCst) {
            p.store.fork_share(uswap::backend::ShareStep::Refresh);
            refresh_at = now + 1_000_000_000;
        }
        // Over the low mark and no progress for a while: faults must not wait for us. Not
        // after one pass: a pass can fail for a moment (a batch given up for an event in
        // flight, or its folios written while being evicted, see `EVICT_TRIES`), and every
        // fault let through meanwhile maps a folio over the limit.
        if n > 0 || p.charged_bytes() <= low(p.limit()) {
            failing_since = 0;
            p.reclaim_stuck.store(false, Ordering::Relaxed);
        } else {
            if failing_since == 0 {
                failing_since = now;
            }
            p.reclaim_stuck.store(now - failing_since >= STUCK_AFTER_NS, Ordering::Relaxed);
        }
        if n == 0 {
            crate::sys::futex_wait(&p.reclaim_wake, v, 20);
        }
    }
    p.kswapd_quiet.store(true, Ordering::SeqCst);
}

/// How long the background reclaimer must fail to make progress, over its low watermark,
/// before faults stop waiting for it (`Pager::reclaim_stuck`): half the longest a single
/// fault waits ([`crate::fault`]'s `THROTTLE_MAX_NS`), so a stuck reclaimer costs the faults
/// of that window at most 20 ms each, once.
const STUCK_AFTER_NS: u64 = 10_000_000;

/// The low watermark at which the fault path wakes the background reclaimer.
pub(crate) fn wake_mark(p: &Pager) -> u64 {
    let limit = p.limit();
    limit - (limit / 32).max((p.cfg.reclaim_batch * PAGE_SIZE) as u64).min(limit / 4)
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
                        p.resident_pages.fetch_add(1, Ordering::AcqRel);
                        p.active.push(entry(r, q, 0));
                    }
                }
                p.cache.free(o);
                pg = head + n;
            }
            _ => pg += 1,
        }
    }
    p.resident_pages.fetch_sub(resident, Ordering::AcqRel);
    if live && b > a {
        // SAFETY: advice on the region's own memory.
        unsafe { libc::madvise(r.addr(a) as *mut _, (b - a) * PAGE_SIZE, libc::MADV_DONTNEED) };
    }
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

    #[test]
    fn ring_is_fifo_and_bounded() {
        let r = Ring::new(4).unwrap();
        for i in 0..4 {
            assert!(r.push(i));
        }
        assert!(!r.push(9));
        assert_eq!(r.pop(), Some(0));
        assert!(r.push(4));
        let v: Vec<u64> = std::iter::from_fn(|| r.pop()).collect();
        assert_eq!(v, vec![1, 2, 3, 4]);
    }

    /// Resident pages of a ring's buffer.
    fn ring_resident_pages(r: &Ring) -> usize {
        (crate::arena::tests::resident(r.buf.as_ptr() as usize, (r.mask + 1) * 8) / 4096) as usize
    }

    #[test]
    fn a_ring_gives_back_the_pages_its_consumer_has_left() {
        // 64 pages of entries; a queue of at most 1000 entries streamed through it 20 times.
        let r = Ring::new(64 * 512).unwrap();
        let (mut next_in, mut next_out) = (0u64, 0u64);
        while next_in < 20 * 64 * 512 {
            while next_in - next_out < 1000 {
                assert!(r.push(next_in));
                next_in += 1;
            }
            for _ in 0..700 {
                assert_eq!(r.pop(), Some(next_out));
                next_out += 1;
            }
        }
        let held = ring_resident_pages(&r);
        assert!(held <= 4, "{held} of 64 pages resident with {} entries queued", next_in - next_out);
        // A producer that has wrapped round into the page the consumer leaves: that page keeps
        // its new entries.
        let r = Ring::new(4 * 512).unwrap();
        let mut want = std::collections::VecDeque::new();
        for i in 0..4 * 512 {
            assert!(r.push(i));
            want.push_back(i);
        }
        for _ in 0..511 {
            assert_eq!(r.pop(), want.pop_front());
        }
        for i in 0..511 {
            assert!(r.push(1 << 32 | i));
            want.push_back(1 << 32 | i);
        }
        while let Some(w) = want.pop_front() {
            assert_eq!(r.pop(), Some(w));
        }
        assert_eq!(r.pop(), None);
    }

    #[test]
    fn blocks_cover_claimed_pages_with_aligned_pieces() {
        let check = |first: usize, n: usize, set: &[usize]| {
            let claimed = |i: usize| set.contains(&i);
            let mut seen = vec![];
            blocks(first, n, &claimed, |pg, k| {
                assert_eq!((pg - first) % (1 << k), 0);
                assert_eq!(pg % (1 << k), 0, "aligned in the region");
                for q in pg..pg + (1 << k) {
                    seen.push(q - first);
                }
            });
            let mut want: Vec<usize> = set.to_vec();
            want.sort();
            assert_eq!(seen, want);
        };
        check(0, 16, &(0..16).collect::<Vec<_>>());
        check(16, 16, &[0, 1, 2, 3, 5, 8, 9, 10, 11, 12, 13, 14, 15]);
        check(0, 1, &[0]);
        check(512, 512, &(1..512).collect::<Vec<_>>());
    }

    #[test]
    fn entries_roundtrip() {
        let e = entry_raw(crate::region::MAX_REGIONS - 1, 0xffe, 123_456, 4);
        assert_eq!(decode(e), (crate::region::MAX_REGIONS - 1, 0xffe, 123_456, 4));
        let e = entry_raw(5, 0, usize::from(u16::MAX) << 8, 9);
        assert_eq!(decode(e), (5, 0, usize::from(u16::MAX) << 8, 9));
    }
}
