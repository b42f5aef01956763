//! The fault path: the SIGBUS handler, fault resolution, and the event thread.
//!
//! With `UFFD_FEATURE_SIGBUS` a missing (or write-protected) page of a region raises SIGBUS in
//! the thread that touched it. The handler (`on_sigbus`) reads `si_addr`, finds the region in the
//! lock-free registry, and [`resolve`]s the page in that thread: swap-in (or zero-fill, or a
//! refault from the swap cache) and one `UFFDIO_COPY`; returning retries the instruction.
//! A swap-in for a read keeps the page's swap entry and maps it write-protected (`CLEAN`, see
//! [`KeepClean`]); the first write then faults here again and [`unclean`] frees the
//! entry and lifts the protection, so the store never holds a stale copy of a mapped page. A
//! SIGBUS for an address outside every region is passed on to the handler installed before
//! ours (or the default action, which kills the process as it would have).
//!
//! The handler may have interrupted anything, `malloc` included. The contract of this path
//! is `docs/design.md`, "Deadlock freedom": it runs inside a [`uswap::sync::FaultScope`]
//! (entered in [`handle_fault`] and [`try_fault`]); it calls no allocator (page claims are
//! CASes on the page words, buffers come from a fixed pool taken by CAS ([`crate::bufs`]; the
//! guard gives its buffer back when dropped), counters are atomics, and the engine takes its
//! memory from preallocated lists and its page heap); the only locks it takes are a ring's
//! spinlock and the engine locks of the classes the contract lists, none of which is ever
//! held by a thread that touches managed memory, so none is held by the thread the handler
//! interrupted; and asynchronous signals are blocked while it runs (the handler's mask), so no
//! program handler runs on top of it. `tests/contract.rs` counts all of this. It runs on the
//! stack of whatever the program was doing, so it keeps no per-page array there: every fill
//! takes a buffer first, whose side area ([`Scratch`]) holds its claim's old words and a
//! cached folio's kept entries, and the sets of pages held or refused are 64-byte bitmaps
//! ([`PageSet`]). Concurrent faults on one folio: the first CASes its pages to `BUSY` and
//! fills it; the others see `BUSY`, wait (spin, then
//! `sched_yield`) without holding anything, and retry. On x86-64 bit 1 of the page-fault
//! error code (`REG_ERR` in the ucontext) says whether the access was a write.
//!
//! A fill ([`fill`]) is one sequence whichever way the data comes (swap cache, a large stored
//! folio, one page of one, 4 KiB pages or zeros): claim the pages ([`Claim`]), load, copy
//! (`UFFDIO_COPY`), publish, put what held the data before.
//!
//! The event thread reads the uffd: in SIGBUS mode only non-cooperative events (munmap,
//! mremap, fork, and madvise if enabled); in [`FaultMode::Thread`](crate::FaultMode) also the
//! page-fault messages, which it resolves the same way and then wakes the faulting thread.
//!
//! Locking: the page-word claims described in [`crate::page`], plus the engine locks of the
//! store calls and the rings' spinlocks (see above). A fault path claims pages through a
//! [`Claim`] (CAS to `BUSY`), which rolls back to the old words when dropped unpublished, so
//! every way out of a fill leaves no page `BUSY`. A fill takes its buffer before it claims a
//! page, so it never waits for the pool while holding pages. A fault taken inside this
//! thread's own reclaim (on the folio it is copying) maps zeros and reclaims nothing.

use crate::bufs::Scratch;
use crate::page::{kind, Claim, PageSet, PageWord, CLEAN_MAX_ENTRY};
use crate::reclaim::{self, entry};
use crate::region::{self, RegionInner};
use crate::stats::{inc, now_ns};
use crate::uffd::{Event, Filled};
use crate::{Pager, ReclaimMode, Replacement, SwapinPolicy, PAGE_SIZE};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

/// Outcome of [`handle_fault`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Handled {
    /// The address is in a region and was served (or the region is going away).
    Yes,
    /// Not one of ours.
    NotOurs,
}

/// Serve a fault at `addr`. `write` = the access was a write; `wake` = wake threads blocked
/// on the page (message mode).
pub(crate) fn handle_fault(addr: usize, write: bool, wake: bool) -> Handled {
    let _fault = uswap::sync::FaultScope::enter();
    region::enter();
    // SAFETY: between enter and leave; r is not used after the leave below.
    let Some(r) = (unsafe { region::lookup(addr) }) else {
        region::leave();
        return Handled::NotOurs;
    };
    let p = r.pager();
    let t0 = if p.cfg.record_latency { now_ns() } else { 0 };
    inc(&p.counters.faults, 1);
    let pg = (addr - r.start) / PAGE_SIZE;
    resolve(p, r, pg, write, wake, Wait::Block);
    if p.cfg.record_latency {
        p.counters.record_latency(now_ns() - t0);
    }
    region::leave();
    Handled::Yes
}

fn wait_not_busy(p: &Pager, r: &RegionInner, pg: usize) {
    inc(&p.counters.fault_waits, 1);
    let mut backoff = crate::sys::Backoff::default();
    while r.word(pg).load(Ordering::Acquire).is_busy() {
        backoff.snooze();
    }
}

fn maybe_reclaim(p: &Pager, need: u64) {
    let charged = p.charged_bytes();
    match p.cfg.reclaim {
        ReclaimMode::Direct => {
            if charged + need > p.limit() {
                reclaim::direct_reclaim(p, need);
            }
        }
        ReclaimMode::Background => {
            if charged + need > reclaim::wake_mark(p) {
                crate::sys::futex_wake(&p.reclaim_wake);
            }
            if charged + need > p.limit() {
                reclaim::direct_reclaim(p, need);
            }
        }
    }
    // While the store fails, wait for room rather than map over the limit (`stall`); this
    // thread holds no page here. Then, if still over, the fault breaks the limit.
    let over = || p.charged_bytes() + need > p.limit() + throttle_slack(p);
    if p.health.failing() && over() {
        while over() && p.health.holds_faults(now_ns(), p.cfg.full_wait_ms) {
            inc(&p.counters.fault_throttled, 1);
            crate::sys::sleep_ms(5);
            reclaim::direct_reclaim(p, need);
        }
        if over() && p.health.failing() {
            inc(&p.counters.limit_breaks, 1);
        }
    }
}

/// How a fault may wait.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The faulting thread itself (SIGBUS mode, tests): it may wait for a `BUSY` page and
    /// reclaim directly.
    Block,
    /// The thread that reads the uffd (thread fault mode): it must never wait for another
    /// thread (that thread may be blocked until this one reads its event), so a fault it
    /// cannot finish now is retried later. `wp`: the message was a write-protect fault (the
    /// page is present).
    NoWait {
        /// A write-protect fault.
        wp: bool,
    },
}

/// Outcome of [`try_fault`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Try {
    /// Resolved (the faulting thread was woken).
    Done,
    /// Not now: retry after reading more messages (a page is held by another thread, an
    /// event is pending, or the charge is over the limit while reclaim catches up).
    Retry,
    /// No region holds the address.
    NotOurs,
}

/// Serve a fault message on the thread that reads the uffd, without waiting for anything
/// (see [`Wait::NoWait`]). `force`: map it even if the charge is over the limit (the fault
/// has waited long enough for reclaim). `wake`: wake the faulting thread (false during a fork
/// hold, whose round wakes everyone at its end: [`crate::forkhold`]).
pub(crate) fn try_fault(p: &Pager, addr: usize, write: bool, wp: bool, force: bool, wake: bool) -> Try {
    let _fault = uswap::sync::FaultScope::enter();
    region::enter();
    // SAFETY: between enter and leave; r is not used after the leaves below.
    let Some(r) = (unsafe { region::lookup(addr) }) else {
        region::leave();
        return Try::NotOurs;
    };
    let t0 = if p.cfg.record_latency { now_ns() } else { 0 };
    let pg = (addr - r.start) / PAGE_SIZE;
    let need = (PAGE_SIZE << r.folio_order) as u64;
    if !force && !wp {
        // Throttle: a page to map while the charge is over the limit waits for the reclaimer
        // (the fault is retried), so the limit holds within a few folios. With
        // `PagerConfig::lazy_background` the embedder starts the reclaimer as the charge nears
        // the limit (the preload's reconciler, within a pass; a fork child that inherits half its
        // limit starts it with its event thread); until then such a fault waits at most
        // `THROTTLE_MAX_NS` (not waiting at all let a program that fills memory fast run 4 MiB
        // past its bound of 38 MiB before the reconciler's next pass, 2026-11-29).
        let charged = p.charged_bytes();
        if charged + need > reclaim::wake_mark(p) {
            crate::sys::futex_wake(&p.reclaim_wake);
        }
        let k = r.word(pg).load(Ordering::Acquire).kind();
        let needs_memory = matches!(k, kind::NONE | kind::SWAPPED | kind::CACHED);
        // While the store fails, a stuck reclaimer is what is expected: the fault waits for
        // room all the same, for as long as `stall` says.
        if needs_memory
            && charged + need > p.limit() + throttle_slack(p)
            && (!p.reclaim_stuck.load(Ordering::Relaxed) || p.health.holds_faults(now_ns(), p.cfg.full_wait_ms))
        {
            inc(&p.counters.fault_throttled, 1);
            region::leave();
            return Try::Retry;
        }
    } else if force && !wp && p.health.failing() {
        // Mapped over the limit because the store has failed for longer than faults wait.
        if p.charged_bytes() + need > p.limit() + throttle_slack(p) {
            inc(&p.counters.limit_breaks, 1);
        }
    }
    crate::uffd::AGAIN.with(|c| c.set(false));
    let done = resolve(p, r, pg, write, wake, Wait::NoWait { wp });
    let again = crate::uffd::AGAIN.with(|c| c.replace(false));
    if done && !again {
        inc(&p.counters.faults, 1);
        if p.cfg.record_latency {
            p.counters.record_latency(now_ns() - t0);
        }
    }
    region::leave();
    if done && !again {
        Try::Done
    } else {
        Try::Retry
    }
}

/// In a fork child: page `addr`, which the parent filled for it before its pager ran
/// (`forkserve`), is present; run the fault path on it so that its word agrees (the fill
/// finds the page present, frees its entry and publishes it resident).
pub(crate) fn settle_present(p: &Pager, addr: usize) {
    for _ in 0..1000 {
        if !matches!(try_fault(p, addr, true, false, true, false), Try::Retry) {
            return;
        }
        std::thread::yield_now();
    }
}

/// How far over the limit the charge may go before faults wait for the reclaimer.
fn throttle_slack(p: &Pager) -> u64 {
    (p.limit() / 64).max(4 * p.cfg.folio_size as u64)
}

/// Resolve page `pg` of `r` (the fault path proper). Returns false when it could not finish
/// without waiting (only with [`Wait::NoWait`]; the caller retries later).
pub(crate) fn resolve(p: &Pager, r: &'static RegionInner, pg: usize, write: bool, wake: bool, wait: Wait) -> bool {
    // Not inside this thread's own reclaim: a fault there is on the folio it is copying (BUSY,
    // mapped as zeros below), and reclaiming again could re-enter the store it interrupted.
    if wait == Wait::Block && reclaim::IN_RECLAIM.with(|c| c.get()) == 0 {
        maybe_reclaim(p, (PAGE_SIZE << r.folio_order) as u64);
    }
    loop {
        let w = r.word(pg).load(Ordering::Acquire);
        match w.kind() {
            kind::UNMAPPED => {
                // Not the region's any more: the access retries elsewhere.
                wake_page(p, r, pg, wake);
                return true;
            }
            kind::RESIDENT => {
                // Mapped as far as we know: another thread just filled it, or the program
                // dropped it with madvise (then it reads as zero, as anonymous memory does).
                // Held while anything is mapped: between the load above and the ioctl an
                // eviction may take the page, drop it and publish it SWAPPED, and zeros mapped
                // then would stand in for the data it stored (with 64 KiB folios, where a fill
                // maps the faults of other threads' pages too, a test lost whole pages so).
                inc(&p.counters.fault_spurious, 1);
                if r.word(pg).compare_exchange(w, PageWord::BUSY, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                    continue;
                }
                if p.uffd.zeropage(r.addr(pg), PAGE_SIZE, wake).is_err() && wait != Wait::Block {
                    r.word(pg).store(w, Ordering::Release);
                    return false;
                }
                if write {
                    // A write-protect bit left over (a clean page's, in a mixed eviction that
                    // failed): lift it, holding the page so no eviction protects it meanwhile
                    // (lifting an eviction's protection would let a write slip past its copy).
                    let _ = p.uffd.writeprotect(r.addr(pg), PAGE_SIZE, false, wake);
                }
                r.word(pg).store(w, Ordering::Release);
                wake_page(p, r, pg, wake);
                return true;
            }
            kind::CLEAN => {
                if unclean(p, r, pg, w, wake) {
                    return true;
                }
            }
            kind::BUSY => {
                if reclaim::IN_RECLAIM.with(|c| c.get()) > 0 {
                    // A fault inside our own reclaim on a page we hold (its copy): the program
                    // discarded it behind our back; it reads as zero (see zero_held). Nothing
                    // else drops a page this thread is copying, so if the page is not ours to
                    // take back, zeros are still right, and the access must not fault again.
                    if !zero_held(p, r, pg, w, wake) {
                        let _ = p.uffd.zeropage(r.addr(pg), PAGE_SIZE, wake);
                    }
                    return true;
                }
                if let Wait::NoWait { wp } = wait {
                    let copying = w == PageWord::BUSY_COPY || w == PageWord::BUSY_HANDED;
                    if wp && copying {
                        // A write to a page an eviction is copying: take it back rather than
                        // wait for the whole batch and then swap the page in again (the
                        // eviction gives the block up, see `take_back`), and let the write
                        // through; if the eviction got there first the fault waits as before.
                        let lifted =
                            take_back(r, pg, w, || p.uffd.writeprotect(r.addr(pg), PAGE_SIZE, false, wake).is_ok());
                        if lifted == Some(true) {
                            inc(&p.counters.reclaim_handed_back, 1);
                            return true;
                        }
                        inc(&p.counters.fault_waits, 1);
                        return false;
                    }
                    if !wp && copying {
                        // A missing-page fault on a page an eviction is copying: the program
                        // dropped it (madvise) under the copy. It reads as zero now, and the
                        // eviction copies (and stores) those zeros.
                        inc(&p.counters.fault_spurious, 1);
                        return zero_held(p, r, pg, w, wake);
                    }
                    inc(&p.counters.fault_waits, 1);
                    return false;
                }
                wait_not_busy(p, r, pg);
            }
            _ => {
                let again0 = crate::uffd::AGAIN.with(|c| c.get());
                if fill(p, r, pg, w, write, wake) {
                    return true;
                }
                if wait != Wait::Block && (crate::uffd::AGAIN.with(|c| c.get()) || again0) {
                    return false;
                }
            }
        }
        if wait != Wait::Block && crate::uffd::AGAIN.with(|c| c.get()) {
            return false;
        }
    }
}

/// Take page `pg` back from the eviction that holds it (`w`: `BUSY_COPY`, or `BUSY_HANDED`
/// after an earlier take-back) and run `op` on it: CAS to `BUSY_WANTED`, `op`, then
/// `BUSY_HANDED`. From the CAS on, the eviction gives the page's block up instead of dropping
/// it (it turns pages from `BUSY_COPY` to `BUSY_DROP` only by CAS), and it publishes the block
/// only once the word is `BUSY_HANDED` (`reclaim::publish`), so `op`'s ioctl always acts on a
/// page this eviction still holds: run late, on a page republished and taken by another
/// eviction, an unprotect would let a write slip past that one's copy (a test with 64 KiB
/// folios lost a whole round of writes to a page so), and zeros could land on a page it has
/// just dropped. `None` if the page was not the eviction's to give (the CAS failed).
fn take_back(r: &RegionInner, pg: usize, w: PageWord, op: impl FnOnce() -> bool) -> Option<bool> {
    let word = r.word(pg);
    if w == PageWord::BUSY_WANTED
        || word.compare_exchange(w, PageWord::BUSY_WANTED, Ordering::AcqRel, Ordering::Relaxed).is_err()
    {
        return None;
    }
    let done = op();
    word.store(PageWord::BUSY_HANDED, Ordering::Release);
    Some(done)
}

/// A missing-page fault on page `pg`, which an eviction holds (`w`): the program dropped it
/// where no call of ours saw (glibc's internal `madvise` of an exited thread's stack, a raw
/// system call) and the eviction's copy faulted on it, or the fault is an old one, read after
/// the page was filled. The page is taken back ([`take_back`]: the eviction gives the block
/// up) and zeros are mapped write-protected (a present page is left as it is), so the copy
/// can go on. False when the page was not the eviction's to give, or the copy failed (retry).
fn zero_held(p: &Pager, r: &RegionInner, pg: usize, w: PageWord, wake: bool) -> bool {
    take_back(r, pg, w, || {
        // SAFETY: the zero buffer holds one readable page; the page is taken back from the
        // eviction (an EEXIST, a present page, is reported as Filled::Exists, not an error).
        unsafe { p.uffd.copy(r.addr(pg), p.bufs.zero(), PAGE_SIZE, true, wake) }.is_ok()
    }) == Some(true)
}

/// Record a fault at `pg` of `r`: whether it follows the region's last one (the next page, or
/// the same or the next folio; the region's first fault counts), and how many such steps in a
/// row end here.
fn seq_fault(r: &RegionInner, pg: usize) -> (bool, u32) {
    let fp = 1usize << r.folio_order;
    let last = r.last_fault.swap(pg, Ordering::Relaxed);
    let seq = last != usize::MAX && (pg / fp == last / fp + 1 || pg / fp == last / fp || pg == last + 1);
    let streak = if seq {
        r.seq_streak.fetch_add(1, Ordering::Relaxed) + 1
    } else {
        r.seq_streak.store(0, Ordering::Relaxed);
        0
    };
    (seq || last == usize::MAX, streak)
}

/// Sequential steps (see [`seq_fault`]) in a row before a swap-in takes a whole folio (a
/// large stored folio, or the 4 KiB stored pages of a large-folio region); until then it takes
/// only the faulting page. One step is not a stream: an
/// object that straddles a page (or folio) boundary faults twice in a row under random access
/// too, and a whole swap-in then brings 15 pages of a 64 KiB folio that nobody asked for
/// (with one step, the suite's Redis swapped in 2.4x the bytes it did with 4 KiB folios:
/// BENCHMARKS.md, 2026-11-25, sixteenth session), and so do neighbouring objects: Redis during
/// a BGSAVE, its small objects evicted, faults on a key's entry, key and value object in
/// neighbouring folios; with one step for 4 KiB stored pages, 60 k of 537 k swap-ins mapped
/// 962 k pages and the save took 15 s instead of 10 (2026-11-28). A stream pays two 4 KiB
/// faults at its start.
const STREAM_STEPS: u32 = 2;

fn large_ok(p: &Pager, r: &RegionInner) -> bool {
    match p.cfg.swapin {
        SwapinPolicy::Always => true,
        SwapinPolicy::Never => false,
        SwapinPolicy::Madvise => r.huge_hint.load(Ordering::Relaxed),
    }
}

/// What a fill's claimed pages become when published.
#[derive(Copy, Clone)]
enum Mapped<'k> {
    /// RESIDENT.
    Resident,
    /// CLEAN (write-protected), keeping the swap entries of the claim's old SWAPPED words.
    CleanOld,
    /// CLEAN, keeping the swap entries of these SWAPPED words (one per page of the claim).
    CleanKept(&'k [PageWord]),
}

/// Publish the held pages of `c` (on `[first, first + c.len())`) as mapped, in aligned blocks,
/// as `how` says, and queue them on the protected list when `hot` (a swap-in that came back
/// soon: [`reclaim::refault_is_hot`]), else on the active list.
fn publish(p: &Pager, r: &RegionInner, first: usize, c: &mut Claim<'_>, how: Mapped<'_>, hot: bool) -> usize {
    let mut count = 0;
    let held = c.held_set();
    reclaim::blocks(first, c.len(), &|i| held.contains(i), |pg, k| {
        for i in pg - first..pg - first + (1 << k) {
            let w = match how {
                Mapped::Resident => PageWord::resident(k),
                Mapped::CleanOld => PageWord::clean(k, c.old(i).payload(), c.old(i).order()),
                Mapped::CleanKept(kept) => PageWord::clean(k, kept[i].payload(), kept[i].order()),
            };
            c.set(i, w);
        }
        reclaim::queue_mapped(p, r, pg, k, hot);
        count += 1 << k;
    });
    p.resident_pages.fetch_add(count as i64, Ordering::AcqRel);
    inc(&p.counters.pages_mapped, count as u64);
    if !matches!(how, Mapped::Resident) {
        r.had_clean.store(true, Ordering::Relaxed);
        inc(&p.counters.clean_kept, count as u64);
        p.keep.kept(count as u64);
    }
    count
}

/// Workingset: page `first + i` (for each `swapped[i]`) came back from the store; see
/// [`reclaim::Workingset`].
fn note_refaults(p: &Pager, r: &RegionInner, first: usize, swapped: impl Iterator<Item = bool>) {
    if p.cfg.replacement != Replacement::TwoList {
        return;
    }
    let win = reclaim::inactive_window(p);
    for (i, s) in swapped.enumerate() {
        if s {
            p.ws.refault(r, first + i, win);
        }
    }
}

/// Clean-page retention: whether a read fault's swap-in keeps the page's swap entry, mapping the
/// page write-protected (`CLEAN`) so that evicting it again costs one `MADV_DONTNEED` instead of
/// a write-protect, a compression and a store. The price is a write-protect fault when the page
/// is written later, and the entry's pool memory for as long as the page is mapped. So, like
/// the kernel (which frees the slot of a folio mapped writable, or when swap is half full):
/// - only read faults keep. In both fault modes: in thread mode the later write costs a
///   hand-off (~16 µs here), but evicting a page that was written costs more (a write-protect
///   with its TLB-flush IPIs, a compression, a store and often a file write), and a program
///   that thrashes mostly re-reads: Redis with a BGSAVE under `uswap run` evicted 2.6 M pages
///   clean and took 19 k write-protect faults, 72.7 → 62.7 s (BENCHMARKS.md, 2026-11-25);
/// - not while stored data takes more than half a page of RAM per page (it compresses
///   badly and lives in RAM): a kept copy would cost more than it saves;
/// - and not while more than a third of the kept pages get written: re-decided every
///   `WINDOW` kept pages, still keeping one swap-in in 16 while off to keep measuring.
pub(crate) struct KeepClean {
    on: bool,
    kept: std::sync::atomic::AtomicU64,
    dirtied: std::sync::atomic::AtomicU64,
    tick: std::sync::atomic::AtomicU64,
    off: std::sync::atomic::AtomicBool,
}

impl KeepClean {
    const WINDOW: u64 = 4096;

    /// A policy that keeps clean pages when `on`.
    pub(crate) fn new(on: bool) -> KeepClean {
        KeepClean {
            on,
            kept: Default::default(),
            dirtied: Default::default(),
            tick: Default::default(),
            off: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Should a read fault's swap-in keep its entry?
    #[inline]
    pub(crate) fn keep(&self, p: &Pager) -> bool {
        if !self.on || p.store.ram_per_page(p.cfg.group).is_some_and(|b| b > PAGE_SIZE as u64 / 2) {
            return false;
        }
        !self.off.load(Ordering::Relaxed) || self.tick.fetch_add(1, Ordering::Relaxed).is_multiple_of(16)
    }

    /// `n` pages were mapped clean.
    pub(crate) fn kept(&self, n: u64) {
        let k = self.kept.fetch_add(n, Ordering::Relaxed) + n;
        if k >= Self::WINDOW {
            let d = self.dirtied.swap(0, Ordering::Relaxed);
            self.kept.store(0, Ordering::Relaxed);
            self.off.store(d * 3 > k, Ordering::Relaxed);
        }
    }

    /// `n` clean pages were written.
    pub(crate) fn dirtied(&self, n: u64) {
        self.dirtied.fetch_add(n, Ordering::Relaxed);
    }

    /// True while swap-in keeps clean pages.
    pub(crate) fn keeping(&self) -> bool {
        self.on && !self.off.load(Ordering::Relaxed)
    }
}

/// Any fault on a CLEAN page (a write, in practice: reads do not fault on a mapped page):
/// free the swap entries of its folio's clean pages, lift their write protection and make
/// them RESIDENT. Pages of the folio another thread holds are left to it. Returns false when
/// it lost a race for page `pg` (retry).
fn unclean(p: &Pager, r: &RegionInner, pg: usize, w0: PageWord, wake: bool) -> bool {
    let k = w0.order();
    let n = 1usize << k;
    let head = pg & !(n - 1);
    let mut bi = p.bufs.take();
    let (_, scratch) = bi.parts();
    let mut c = Claim::new(r.words(head, n), &mut scratch.old);
    for i in 0..n {
        let w = if head + i == pg { w0 } else { r.word(head + i).load(Ordering::Acquire) };
        let ok = w.kind() == kind::CLEAN && w.order() == k && c.take(i, w);
        if head + i == pg && !ok {
            return false; // the claim rolls back
        }
    }
    // Unprotect only the pages we hold: another thread may be evicting the others, relying on
    // their protection.
    if !region::runs(n, &|i| c.held(i), |i, j| {
        p.uffd.writeprotect(r.addr(head + i), (j - i) * PAGE_SIZE, false, wake).is_ok()
    }) {
        // The range is gone (unmapped): the unmap event releases the pages.
        c.roll_back_all();
        return true;
    }
    let mut d = 0;
    c.publish(|_, old| {
        p.store.put(old.clean_entry(), 1);
        d += 1;
        PageWord::resident(k)
    });
    inc(&p.counters.clean_dirtied, d);
    p.keep.dirtied(d);
    true
}

/// Wake the thread that faulted on page `pg` of `r` (message mode, `wake`), when the fault path
/// ends without mapping it itself: the page was unmapped meanwhile, found present, or kept
/// its word after the kernel refused it (the thread then retries the access).
fn wake_page(p: &Pager, r: &RegionInner, pg: usize, wake: bool) {
    if wake {
        let _ = p.uffd.wake(r.addr(pg), PAGE_SIZE);
    }
}

/// What [`copy_runs`] did.
struct Copied {
    /// Pages the kernel refused (the caller restores their words).
    failed: PageSet,
    /// Some page of a run was present already (`EEXIST`), so not mapped by this copy: it holds
    /// what an earlier copy of this folio left, cut short by `EAGAIN` and rolled back, or what
    /// the program wrote there since, and it may be writable. The kernel's page is the truth
    /// then: the fill must publish it `RESIDENT` (freeing the entries), never `CLEAN`, whose
    /// kept entry would be stale once the program writes a page it was never made to fault on.
    existed: bool,
}

/// Copy the runs of pages `c` holds in `[first, first + c.len())` from `src` (laid out like
/// the range) into place; `wp` maps them write-protected.
///
/// A run the kernel refuses whole (a folio that crosses into another mapping, e.g. the
/// `PROT_NONE` rest of a reservation: `UFFDIO_COPY` needs one VMA) is copied page by page.
/// Returns what it did, or `None` when an event is pending (`EAGAIN` on the event thread:
/// retry everything later; pages a partial copy mapped meanwhile stay mapped, see
/// [`Copied::existed`]).
fn copy_runs(
    p: &Pager,
    r: &RegionInner,
    first: usize,
    c: &Claim<'_>,
    src: *const u8,
    wp: bool,
    wake: bool,
) -> Option<Copied> {
    let again = || crate::uffd::AGAIN.with(|c| c.get());
    let mut out = Copied { failed: PageSet::default(), existed: false };
    region::runs(c.len(), &|i| c.held(i), |i, j| {
        // SAFETY: src holds c.len() pages; the destination pages are claimed (BUSY) and missing.
        let whole = unsafe { p.uffd.copy(r.addr(first + i), src.add(i * PAGE_SIZE), (j - i) * PAGE_SIZE, wp, wake) };
        match whole {
            Ok(f) => {
                out.existed |= f == Filled::Exists;
                return true;
            }
            Err(_) if again() => return false,
            Err(_) => {}
        }
        for q in i..j {
            // SAFETY: as above, one page.
            match unsafe { p.uffd.copy(r.addr(first + q), src.add(q * PAGE_SIZE), PAGE_SIZE, wp, wake) } {
                Ok(f) => out.existed |= f == Filled::Exists,
                Err(_) => out.failed.insert(q),
            }
        }
        !again()
    });
    (!again()).then_some(out)
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
            p.active.push(entry(r, head + i, 0));
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
    p.resident_pages.fetch_add(mapped, Ordering::AcqRel);
    p.cache.free(o);
}

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
/// - [`fill_small`]: zero-fill or 4 KiB swap-in (a whole folio, a readahead window, a page).
fn fill(p: &Pager, r: &'static RegionInner, pg: usize, w0: PageWord, write: bool, wake: bool) -> bool {
    let k0 = w0.order();
    match w0.kind() {
        kind::CACHED => fill_cached(p, r, pg, w0, write, wake),
        kind::SWAPPED if k0 > 0 => {
            let (_, streak) = seq_fault(r, pg);
            let whole = large_ok(p, r) && (!p.cfg.adaptive || streak >= STREAM_STEPS);
            if whole {
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
    if !p.ws.bypassed() {
        // (While bypassed, the swap cache is not aged: a hit on what it still holds
        // from before says nothing about recency; shadows measure instead.)
        p.ws.hit(1);
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
    // Copy.
    let clean = !write && e < CLEAN_MAX_ENTRY && p.keep.keep(p);
    // SAFETY: page pg is claimed and missing; the buffer holds its data.
    let res = unsafe { p.uffd.copy(r.addr(pg), buf.as_ptr(), PAGE_SIZE, clean, wake) };
    if res.is_err() {
        c.roll_back_all();
        wake_page(p, r, pg, wake);
        return true;
    }
    // Publish, put (a page present already is not clean: see `Copied::existed`).
    let clean = clean && matches!(res, Ok(Filled::Done));
    let hot = reclaim::refault_is_hot(p, r, pg);
    if clean {
        publish(p, r, pg, &mut c, Mapped::CleanOld, hot);
    } else {
        p.store.put(e, 1);
        publish(p, r, pg, &mut c, Mapped::Resident, hot);
    }
    note_refaults(p, r, pg, std::iter::once(true));
    inc(&p.counters.swpin_fallback[k0 as usize], 1);
    inc(&p.counters.swpin[0], 1);
    inc(&p.counters.fault_swapin, 1);
    true
}

/// Zero-fill or 4 KiB swap-in around `pg`: the whole folio of the region when faults are
/// sequential (a swap-in: a stream of [`STREAM_STEPS`]; or not adaptive), a readahead window
/// in 4 KiB regions, else just the page.
fn fill_small(p: &Pager, r: &'static RegionInner, pg: usize, w0: PageWord, write: bool, wake: bool) -> bool {
    let fo = r.folio_order;
    let (seq, streak) = seq_fault(r, pg);
    // A zero-fill takes the folio at one step (cheap, and growth is sequential); a swap-in
    // only in a stream (`STREAM_STEPS`), as a large stored folio does.
    let stream = if w0.kind() == kind::SWAPPED { streak >= STREAM_STEPS } else { seq };
    let (first, n) = if fo > 0 && (stream || !p.cfg.adaptive) {
        let n = 1usize << fo;
        (pg & !(n - 1), n)
    } else if fo == 0 && w0.kind() == kind::SWAPPED && p.cfg.readahead_pages > 1 && streak > 0 {
        let win = (1usize << streak.min(9)).min(p.cfg.readahead_pages).min(r.npages - pg);
        (pg, win)
    } else {
        (pg, 1)
    };
    // swap_ra_hit: a fault right after the previous readahead window consumed it.
    let ra = r.ra_end.load(Ordering::Relaxed);
    if ra != usize::MAX
        && ra >> 16 == pg
        && ra & 0xffff > 0
        && r.ra_end.compare_exchange(ra, usize::MAX, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    {
        inc(&p.counters.swap_ra_hit, (ra & 0xffff) as u64);
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
            inc(&p.counters.swap_ra, swapped - 1);
            r.ra_end.store(((first + n) << 16) | ((swapped - 1) as usize & 0xffff), Ordering::Relaxed);
        }
    } else {
        inc(&p.counters.fault_zero, 1);
        if swapped > 0 {
            inc(&p.counters.swpin[0], swapped);
        }
    }
    true
}

// ---------------------------------------------------------------------------------------
// SIGBUS handler

static PREV: OnceLock<libc::sigaction> = OnceLock::new();

/// Install the process-wide SIGBUS handler (once). The previous handler is kept and called
/// for addresses outside every region.
pub(crate) fn install_sigbus_handler() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        // Warm up everything the handler touches lazily (TLS shard index, size classes).
        let _ = crate::arena::class_of(0);
        let _ = reclaim::IN_RECLAIM.with(|c| c.get());
        // SAFETY: building a sigaction with our handler; sigaction(2) with valid pointers.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_NODEFER;
            crate::sys::fault_handler_mask(&mut sa.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &sa, &mut old) != 0 {
                return Err(format!("sigaction(SIGBUS): {}", std::io::Error::last_os_error()));
            }
            let _ = PREV.set(old);
        }
        Ok(())
    })
    .clone()
}

/// The SIGBUS handler.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno slot of this thread; the kernel passes valid info and ucontext pointers.
    unsafe {
        let errno = *libc::__errno_location();
        let addr = (*info).si_addr() as usize;
        let write = fault_is_write(ctx);
        if (*info).si_code > 0 && handle_fault(addr, write, false) == Handled::Yes {
            *libc::__errno_location() = errno;
            return;
        }
        chain(sig, info, ctx);
        *libc::__errno_location() = errno;
    }
}

#[cfg(target_arch = "x86_64")]
fn fault_is_write(ctx: *mut libc::c_void) -> bool {
    if ctx.is_null() {
        return true;
    }
    // SAFETY: for SA_SIGINFO handlers the third argument is the ucontext_t.
    let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
    uc.uc_mcontext.gregs[libc::REG_ERR as usize] & 2 != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn fault_is_write(_ctx: *mut libc::c_void) -> bool {
    // Unknown: treat as a write (a zero page is then never mapped for it).
    true
}

/// Pass a SIGBUS that is not ours to the previous handler, or restore the default action.
///
/// # Safety
/// - Must be called from the SIGBUS handler with the kernel's arguments.
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(prev) = PREV.get() else { return };
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // SAFETY: restoring the default disposition; returning re-runs the faulting access,
        // which then terminates the process as it would have without us. A SIGBUS sent by
        // kill() is re-raised.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
            if (*info).si_code <= 0 {
                libc::raise(libc::SIGBUS);
            }
        }
        return;
    }
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed as an SA_SIGINFO handler.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

// ---------------------------------------------------------------------------------------
// Event thread

/// How long the event thread keeps polling after a page fault in thread mode.
const SPIN_NS: u64 = 100_000;
/// How long such a spin keeps the CPU before it yields to any other thread that wants it
/// (most of a thrashing program's next faults come within 25 µs).
const SPIN_ALONE_NS: u64 = 25_000;
/// How long a fault waits for the reclaimer before it is mapped over the limit anyway (so a
/// reclaimer that cannot make progress slows the program down but never hangs it).
const THROTTLE_MAX_NS: u64 = 20_000_000;

thread_local! {
    static EVENT_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True on the thread that reads the uffd.
pub(crate) fn on_event_thread() -> bool {
    EVENT_THREAD.with(|c| c.get())
}

/// A fault message not resolved yet.
#[derive(Copy, Clone)]
struct PendingFault {
    addr: usize,
    write: bool,
    wp: bool,
    since: u64,
    /// The faulting thread (0 when the kernel does not say).
    tid: u32,
}

/// Wake-ups a fork hold's round defers to its end, at most (further faults wait for the next
/// round).
const HOLD_WAKES: usize = 256;

/// Read the uffd until the pager stops: events always, page faults in thread mode.
///
/// This thread never waits for another thread: other threads may be blocked in the kernel
/// until it reads their event (munmap, mremap, madvise, fork) or their fault. An event or a
/// fault it cannot finish now (a page held by another thread, an ioctl refused while an
/// event is pending, the charge over the limit) is kept and retried after the next read, in
/// order: events first, then faults.
pub(crate) fn event_loop(p: &Pager) {
    // Per-thread engine state made here, not on this thread's first fault.
    uswap::prepare_thread();
    EVENT_THREAD.with(|c| c.set(true));
    crate::uffd::NOWAIT.with(|c| c.set(true));
    let mut msgs = [crate::uffd::empty_msg(); 64];
    let mut faults: Vec<PendingFault> = Vec::with_capacity(1024);
    let mut events: std::collections::VecDeque<Event> = std::collections::VecDeque::with_capacity(64);
    let stop_fd = std::os::fd::AsRawFd::as_raw_fd(&p.stop_fd);
    // In thread mode, after a page fault the thread polls the uffd without sleeping for a
    // while: the next fault of a thrashing program then finds it awake, which saves the
    // wake-up of an idle vCPU (tens of µs here) on every fault. Not while several program
    // threads fault (below): then no vCPU is idle, and the polling takes one from them.
    let spin_ns = if p.cfg.fault_mode == crate::FaultMode::Thread { SPIN_NS } else { 0 };
    let mut spin_until = 0u64;
    // This thread's preemptions when its current spin began (see below).
    let mut spin_preempted = 0u64;
    let mut follow = crate::cpu::Follower::new(&p.place);
    let mut hold_view = crate::forkhold::HoldView::default();
    let mut hold_wakes: Vec<usize> = Vec::with_capacity(HOLD_WAKES);
    // A fork child served from our state until its own pager runs (`forkserve`).
    let mut child: Option<crate::forkserve::Child> = None;
    while !p.stop.load(Ordering::Acquire) {
        // This thread's thread vector stays pinned where glibc keeps it (`own`).
        crate::own::pin_thread_vector();
        if let Some(c) = &mut child {
            if c.step(p, &mut msgs) {
                // Closes the descriptor: the child registers its own uffd.
                child = None;
            } else {
                spin_until = 0;
            }
        }
        let pending = !faults.is_empty() || !events.is_empty();
        if spin_until == 0 || now_ns() > spin_until {
            spin_until = 0;
            // The uffd is non-blocking: the thread only ever waits here, on the uffd and on the
            // stop eventfd that `Pager::drop` writes, so teardown never waits for a timeout or
            // a fault that will not come. With work pending it wakes every 100 µs to retry;
            // while it serves a fork child, also on the eventfd the child writes when it takes
            // over (and every millisecond).
            let mut pfd = [
                libc::pollfd { fd: p.uffd.raw(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: stop_fd, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: child.as_ref().map_or(-1, |c| c.raw()), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: p.fork_serve.wake_fd(), events: libc::POLLIN, revents: 0 },
            ];
            p.ev_quiet.store(true, Ordering::SeqCst);
            if child.is_some() {
                let ts = libc::timespec { tv_sec: 0, tv_nsec: if pending { 100_000 } else { 1_000_000 } };
                // SAFETY: four valid pollfds (a negative fd is ignored) and a valid timeout.
                unsafe { libc::ppoll(pfd.as_mut_ptr(), 4, &ts, std::ptr::null()) };
            } else if pending {
                // Faults held while the store fails wait for the reclaimer's next retry (every
                // 20 ms): no need to look a hundred times as often.
                let ns = if p.health.failing() { 2_000_000 } else { 100_000 };
                let ts = libc::timespec { tv_sec: 0, tv_nsec: ns };
                // SAFETY: two valid pollfds and a valid timeout.
                unsafe { libc::ppoll(pfd.as_mut_ptr(), 2, &ts, std::ptr::null()) };
            } else {
                // SAFETY: two valid pollfds.
                let n = unsafe { libc::poll(pfd.as_mut_ptr(), 2, -1) };
                if n <= 0 || pfd[1].revents != 0 || pfd[0].revents & libc::POLLIN == 0 {
                    if pfd[0].revents & libc::POLLNVAL != 0 {
                        break;
                    }
                    continue;
                }
            }
            p.ev_quiet.store(false, Ordering::SeqCst);
            if pfd[1].revents != 0 {
                continue;
            }
        } else {
            p.ev_quiet.store(false, Ordering::SeqCst);
        }
        // A fork hold in force (checked after `ev_quiet` is false: `ForkHold::begin`).
        let mut hold_tid = p.hold.check(&mut hold_view);
        let hold_gen = hold_tid.map(|_| p.hold.generation());
        let seq = p.ev_reads.fetch_add(1, Ordering::SeqCst) + 1;
        let n = {
            let _g = p.read_gate.lock();
            p.uffd.read_msgs(&mut msgs).unwrap_or(0)
        };
        // A spin gives way to other threads. Once it has found nothing for a while it yields
        // the CPU on every empty read, and a spin that was preempted or gave way and finds
        // nothing on resuming is over: another thread wanted this CPU (the program, runnable
        // for a reason other than a fault, or another process), and polling on would take
        // CPU time from it rather than from an idle CPU. (A switch that ends in a fault is the
        // hand-off working: the program ran, here, until it faulted again.) Redis serving
        // GETs to a client on the same 2 CPUs: 29-34 k/s spinning the whole window, 45-48 k/s
        // never spinning, 41-44 k/s so; python3 building a dict under 227M: 37 s spinning,
        // 68-76 s never, 31-45 s so (BENCHMARKS.md, 2026-11-27).
        if n == 0 && spin_until != 0 {
            if crate::cpu::preemptions() != spin_preempted {
                spin_until = 0;
            } else if now_ns() + spin_ns > spin_until + SPIN_ALONE_NS {
                // SAFETY: sched_yield has no arguments and cannot fail.
                unsafe { libc::syscall(libc::SYS_sched_yield) };
            }
        }
        let mut spin_began = false;
        for m in &msgs[..n] {
            match crate::uffd::decode(m) {
                Event::Pagefault { addr, write, wp, tid } => {
                    let now = now_ns();
                    follow.on_fault(&p.place, tid, now);
                    // Not while several threads fault: they keep the CPUs busy, and polling
                    // would take one from them (xz -T2 -6 under 200M: 54.7 / 57.7 s polling,
                    // 47.8 / 49.3 s not).
                    if spin_ns > 0 && !follow.several_threads_fault() {
                        spin_until = now + spin_ns;
                        spin_began = true;
                    }
                    if wp {
                        inc(&p.counters.fault_wp, 1);
                    }
                    let a = addr as usize & !(PAGE_SIZE - 1);
                    faults.push(PendingFault { addr: a, write, wp, since: 0, tid });
                }
                Event::Fork { uffd } => {
                    inc(&p.counters.ev_fork, 1);
                    // The copy is complete: the hold is over.
                    p.hold.forked(&mut hold_view);
                    hold_tid = None;
                    // The child's copy of the pager registers its regions on a uffd of its own
                    // (the LD_PRELOAD library's atfork handler, `Pager::restart_in_fork_child`);
                    // until then this descriptor holds its registrations, and its faults are
                    // served from our state (`forkserve`), which must not change meanwhile. A
                    // fork no atfork handler held for (a raw `clone`), or a second one, is
                    // let go at once: closing it unregisters the child's copies.
                    if child.is_none() {
                        child = crate::forkserve::Child::begin(p, uffd, hold_gen);
                    } else {
                        // SAFETY: the kernel gave us this fd.
                        unsafe { libc::close(uffd) };
                    }
                }
                ev @ Event::Remap { .. } => {
                    inc(&p.counters.ev_remap, 1);
                    events.push_back(ev);
                }
                ev @ Event::Remove { .. } => {
                    inc(&p.counters.ev_remove, 1);
                    events.push_back(ev);
                }
                ev @ Event::Unmap { .. } => {
                    inc(&p.counters.ev_unmap, 1);
                    events.push_back(ev);
                }
                Event::Unknown(_) => {}
            }
        }
        // The spin's baseline: one system call per read, not per fault message, and before
        // the faults are served (a switch during their ioctls counts against the spin).
        if spin_began {
            spin_preempted = crate::cpu::preemptions();
        }
        // During a fork hold: work only while the forking thread cannot be in `clone`, and
        // wake nobody before the round's work is done.
        let its_fault = hold_tid.is_some_and(|t| faults.iter().any(|f| f.tid as i32 == t));
        let pending = !faults.is_empty() || !events.is_empty();
        let (mut round, mut first_forced) = p.hold.round(&mut hold_view, hold_tid, its_fault, pending);
        if child.is_some() {
            // Serving a fork child: our state stays what its copy is.
            (round, first_forced) = (crate::forkhold::Round::Wait, false);
        }
        if round == crate::forkhold::Round::Wait {
            p.ev_pending.store(events.len(), Ordering::SeqCst);
            p.ev_done.store(seq, Ordering::SeqCst);
            continue;
        }
        if first_forced {
            inc(&p.counters.fork_hold_forced, 1);
        }
        let held = round != crate::forkhold::Round::Free;
        if held {
            p.hold.set_busy(true);
        }
        // Events in order; stop at the first that must wait (later ones may depend on it).
        while let Some(&ev) = events.front() {
            let done = match ev {
                Event::Remap { from, to, len } => crate::vma::remap(p, from as usize, to as usize, len as usize),
                Event::Remove { start, end } => crate::vma::release(p, start as usize, end as usize, false),
                Event::Unmap { start, end } => crate::vma::release(p, start as usize, end as usize, true),
                _ => true,
            };
            if !done {
                break;
            }
            events.pop_front();
        }
        p.ev_pending.store(events.len(), Ordering::SeqCst);
        if !faults.is_empty() {
            let now = now_ns();
            let remap_pending = events.iter().any(|e| matches!(e, Event::Remap { .. }));
            faults.retain_mut(|f| {
                if f.since == 0 {
                    f.since = now;
                }
                if held && hold_wakes.len() == HOLD_WAKES {
                    return true;
                }
                // A hold's round maps over the limit: the reclaimer is paused for the fork. While
                // the store fails, a fault waits longer for room (`stall`).
                let force =
                    (now - f.since > THROTTLE_MAX_NS && !p.health.holds_faults(now, p.cfg.full_wait_ms)) || held;
                let done = match try_fault(p, f.addr, f.write, f.wp, force, !held) {
                    Try::Done => {
                        inc(&p.counters.fault_held_ns, now - f.since);
                        true
                    }
                    Try::Retry => false,
                    // Registered memory no region knows: its pages were never evicted (every
                    // evicted page has a word), so a missing page reads as zero. While a remap
                    // is pending the address may be where moved pages are about to arrive.
                    Try::NotOurs if remap_pending => false,
                    Try::NotOurs => serve_unowned(p, f.addr, !held),
                };
                if done && held {
                    hold_wakes.push(f.addr);
                }
                !done
            });
        }
        if held {
            // Nothing is in flight from here: a `clone` may copy us now.
            p.hold.set_busy(false);
            for a in hold_wakes.drain(..) {
                let _ = p.uffd.wake(a, PAGE_SIZE);
            }
        }
        p.ev_done.store(seq, Ordering::SeqCst);
    }
}

/// A fault on registered memory that no region holds (grown by `mremap` in place, or not
/// adopted yet): zero-fill a missing page, or lift a stale write protection, and wake the
/// thread. Returns false to retry later (an event is pending).
fn serve_unowned(p: &Pager, addr: usize, wake: bool) -> bool {
    inc(&p.counters.fault_unowned, 1);
    crate::uffd::AGAIN.with(|c| c.set(false));
    let ok = match p.uffd.zeropage(addr, PAGE_SIZE, wake) {
        Ok(Filled::Done) => true,
        Ok(Filled::Exists) => p.uffd.writeprotect(addr, PAGE_SIZE, false, wake).is_ok(),
        Err(_) => false,
    };
    if crate::uffd::AGAIN.with(|c| c.replace(false)) {
        return false;
    }
    if !ok && wake {
        // Unmapped meanwhile, or not ours at all: wake the thread so it sees what is there
        // (during a fork hold the round's end does).
        let _ = p.uffd.wake(addr, PAGE_SIZE);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Pager, PagerConfig, PagerError};
    use std::sync::Arc;

    /// A pager, or `None` (the test skips, loudly, or fails under `USWAP_REQUIRE_UFFD`) when
    /// userfaultfd is unavailable.
    fn pager(cfg: PagerConfig) -> Option<Arc<Pager>> {
        match Pager::new(cfg) {
            Ok(p) => Some(p),
            Err(PagerError::Unavailable(w)) => {
                assert!(std::env::var_os("USWAP_REQUIRE_UFFD").is_none(), "userfaultfd unavailable: {w}");
                eprintln!("SKIPPED: userfaultfd unavailable: {w}");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// With `lazy_background` only the event thread starts with the pager; the reclaimer starts
    /// at `start_background` (once, however often it is called), and pages then still go out
    /// under the limit and come back intact.
    #[test]
    fn lazy_background_threads_start_when_asked_and_reclaim() {
        let cfg = PagerConfig {
            limit_bytes: 8 << 20,
            tiers: "zero,lz4".into(),
            fault_mode: crate::FaultMode::Thread,
            lazy_background: true,
            ..Default::default()
        };
        let Some(p) = pager(cfg) else { return };
        assert_eq!(p.threads.lock().unwrap().len(), 1, "only the event thread before start_background");
        p.start_background();
        p.start_background();
        assert_eq!(p.threads.lock().unwrap().len(), 2, "the event thread and the reclaimer");
        let mut r = p.map(32 << 20).unwrap();
        for (i, b) in r.as_mut_slice().iter_mut().enumerate().step_by(PAGE_SIZE) {
            *b = (i / PAGE_SIZE) as u8 | 1;
        }
        assert!(r.as_slice().iter().enumerate().step_by(PAGE_SIZE).all(|(i, &b)| b == (i / PAGE_SIZE) as u8 | 1));
        assert!(p.stats().evicted_pages > 0, "nothing was evicted under the limit");
    }

    /// The pool keeps to its cap (its share of the limit) under a random read and write load
    /// over poorly compressible pages (three quarters random) at a 16M limit with an 8 % pool.
    /// A guard of the invariant: this load kept to it before the reclaimer wrote back what the
    /// pool held over its cap under the low mark too (the case that did not, git's packed
    /// objects, is `git_repack_writes_back_what_its_pool_holds_over_its_cap` in `uswap-cli`'s e2e tests).
    #[test]
    fn the_pool_is_written_back_to_its_cap() {
        let dir = std::env::temp_dir();
        let cfg = PagerConfig {
            limit_bytes: 16 << 20,
            folio_size: 4096,
            tiers: format!("zero,lz4,file:{}", dir.display()),
            fault_mode: crate::FaultMode::Thread,
            pool_percent: 8,
            pool_adapt: false,
            ..Default::default()
        };
        let Some(p) = pager(cfg) else { return };
        let mut r = p.map(48 << 20).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let pages = r.len() / PAGE_SIZE;
        for page in r.as_mut_slice().chunks_mut(PAGE_SIZE) {
            for w in page[..PAGE_SIZE * 3 / 4].chunks_mut(8) {
                w.copy_from_slice(&next().to_le_bytes());
            }
        }
        // Random reads and writes: swap-ins leave holes in the pool's pages.
        let mut sum = 0u64;
        for _ in 0..40_000 {
            let pg = next() as usize % pages;
            let s = r.as_mut_slice();
            sum = sum.wrapping_add(u64::from(s[pg * PAGE_SIZE + 8]));
            if next() % 4 == 0 {
                s[pg * PAGE_SIZE + 16] ^= 1;
            }
        }
        std::hint::black_box(sum);
        // The reclaimer works in the background: give it a moment after the last writes.
        let cap = p.pool_cap();
        let t0 = std::time::Instant::now();
        while p.pool_bytes() > 2 * cap && t0.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(p.pool_bytes() <= 2 * cap, "pool {} bytes against a cap of {cap}", p.pool_bytes());
        assert!(p.stats().evicted_pages > 0);
    }

    /// A swap-in that finds a page of its folio present already (an earlier copy of the folio,
    /// cut short by `EAGAIN` on the event thread and rolled back, left it mapped and writable)
    /// must not publish that page `CLEAN`: the program writes it without a write-protect fault,
    /// and a clean eviction would then drop the write and bring back the stale entry. (A JVM
    /// under `uswap run` with 64 KiB folios lost HashMap table slots so, one run in twenty.)
    #[test]
    fn a_page_present_before_a_clean_swapin_is_not_published_clean() {
        let cfg =
            PagerConfig { limit_bytes: 64 << 20, folio_size: 65536, tiers: "zero,lz4".into(), ..Default::default() };
        let Some(p) = pager(cfg) else { return };
        let r = p.map(65536).unwrap();
        let a = r.as_ptr() as usize;
        let page = |pg: usize| (a + pg * PAGE_SIZE) as *mut u8;
        for pg in 0..16 {
            // SAFETY: page pg of the region.
            unsafe { std::ptr::write_bytes(page(pg), pg as u8 + 1, PAGE_SIZE) };
        }
        assert_eq!(r.evict_all(), 16);
        // What a cut-short copy leaves: page 5 mapped writable (here with the program's later
        // bytes), its word still the stored one.
        let later = [0xbbu8; PAGE_SIZE];
        // SAFETY: page 5 is missing (evicted); `later` is one readable page.
        unsafe { p.uffd.copy(a + 5 * PAGE_SIZE, later.as_ptr(), PAGE_SIZE, false, true) }.unwrap();
        // A read fault on page 0 swaps the folio in; a read keeps its entries (clean).
        region::enter();
        // SAFETY: between enter and leave; the reference is not used after the leave.
        let inner = unsafe { region::lookup(a) }.unwrap();
        assert!(resolve(&p, inner, 0, false, false, Wait::Block));
        region::leave();
        // SAFETY: pages of the region, mapped now.
        let byte = |pg: usize| unsafe { page(pg).add(100).read_volatile() };
        assert_eq!(byte(0), 1);
        assert_eq!(byte(5), 0xbb, "the present page is the kernel's truth");
        // The program writes page 5 (no fault if it is writable), then everything is evicted.
        // SAFETY: page 5 of the region.
        unsafe { std::ptr::write_bytes(page(5), 0xcc, PAGE_SIZE) };
        r.evict_all();
        assert_eq!(byte(5), 0xcc, "a write to a page published clean without its protection was lost");
        for pg in (0..16).filter(|&pg| pg != 5) {
            assert_eq!(byte(pg), pg as u8 + 1, "page {pg}");
        }
    }

    /// A write to a write-protected page in SIGBUS mode reaches our handler (as SIGBUS), which
    /// waits while the page is BUSY (being evicted) and lets the write through afterwards.
    #[test]
    fn wp_fault_is_delivered_as_sigbus_and_waits_for_the_eviction() {
        let Some(p) = pager(PagerConfig { limit_bytes: 4 << 20, folio_size: 4096, ..Default::default() }) else {
            return;
        };
        let r = p.map(4096 * 4).unwrap();
        let a = r.as_ptr() as usize;
        // SAFETY: inside the region.
        unsafe { (a as *mut u64).write_volatile(1) };
        region::enter();
        // SAFETY: between enter and leave; inner is not used after the leave.
        let inner = unsafe { region::lookup(a) }.unwrap();
        let w = inner.word(0).swap(PageWord::BUSY, Ordering::AcqRel);
        region::leave();
        assert_eq!(w.kind(), kind::RESIDENT);
        p.uffd.writeprotect(a, PAGE_SIZE, true, false).unwrap();
        let waits0 = p.stats().fault_waits;
        let t = std::thread::spawn(move || {
            // SAFETY: inside the region (kept alive by the outer scope until join).
            unsafe { (a as *mut u64).write_volatile(2) };
        });
        let t0 = std::time::Instant::now();
        while p.stats().fault_waits == waits0 {
            assert!(t0.elapsed().as_secs() < 10, "the writer never reached the handler");
            std::thread::yield_now();
        }
        // The writer is parked in our handler: the page still holds the old value.
        // SAFETY: reading a write-protected (readable) page.
        assert_eq!(unsafe { (a as *const u64).read_volatile() }, 1);
        p.uffd.writeprotect(a, PAGE_SIZE, false, true).unwrap();
        region::enter();
        // SAFETY: between enter and leave; the reference is not kept.
        unsafe { region::lookup(a) }.unwrap().word(0).store(w, Ordering::Release);
        region::leave();
        t.join().unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { (a as *const u64).read_volatile() }, 2);
        drop(r);
    }
}
