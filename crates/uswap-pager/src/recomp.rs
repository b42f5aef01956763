//! Background recompression: zram's `echo all > idle` + `recompress type=idle`, run by the
//! pager on its own, so a program under `uswap run` (or any pager user) gets the smaller pool
//! without a command.
//!
//! A low-priority thread (`uswap-recomp`, nice 19) wakes every
//! [`PagerConfig::recompress_ms`](crate::PagerConfig::recompress_ms) and asks the store for
//! one pass ([`PageStore::recompress_idle`](crate::PageStore::recompress_idle)): in every
//! pool tier with a secondary algorithm, the objects neither stored nor loaded since the
//! previous pass are re-encoded (zstd), moved if they shrink to a smaller slot, the pool is
//! compacted if anything moved, and everything is marked idle again. So an object is
//! recompressed after it has stayed idle one whole period. It never runs on the fault path:
//! faults only see objects move, as with compaction (the engine rewrites the slot's word
//! under its cluster lock, and refuses a move while the folio is in its swap cache).
//!
//! The same thread moves data between tiers both ways when the store has a pool and a file
//! ([`tier_moves`], seed 002's promotion/demotion): every period, pool objects neither stored
//! nor swapped in for [`PagerConfig::writeback_age_ms`](crate::PagerConfig::writeback_age_ms)
//! (60 s) are written back to the file (proactive writeback by age, counted `zswpwb_proactive`),
//! and file objects swapped in since they got there (a refault: the rest of a large folio read
//! one page at a time, or a clean page's kept copy) are promoted into the pool while it is
//! under nine tenths of its cap (`swp_promote`), at most [`MOVE_PAGES`] each.
//!
//! CPU budget: after a pass that took `c` ns of this thread's CPU time, the next one starts no
//! sooner than `c * 100 / recompress_cpu_percent` later (and never sooner than the period),
//! so on average the thread takes at most that share of one core. A pass is put off (and
//! counted in `recompress_deferred`) while the program is faulting heavily (more than
//! [`BUSY_SWAPINS_PER_S`] swap-ins a second since the last check: the objects it loads are
//! not idle anyway, and the CPU is better left to it) or while the charge is over the limit
//! (the reclaimer is behind). The put-off pass keeps the previous marks: what stays idle
//! meanwhile is recompressed by the next pass that runs.
//!
//! Fork: [`Pager::quiesce`](crate::Pager::quiesce) (the preload's atfork prepare handler)
//! holds the process's passes off (`uswap::tier::zpool::hold_off`: a pass in flight stops at
//! its next object) and waits until this thread is out of its pass ([`Recomp::busy`]), so a fork
//! never copies a pool lock or a zspage's draining mark held by a pass; no pass starts until
//! [`Pager::resume`](crate::Pager::resume).
//!
//! Of the pager: its handshake with this thread is [`Recomp`], the pager's `recomp`; the thread
//! also reads the configuration, the counters, the limit and charge, the stop and pause flags
//! and the background reclaimer's `stuck`, and drives the store.
//!
//! Locking: none of its own. The thread sleeps on a futex word of the pager
//! ([`Recomp::wake`], woken by `Drop`); the pass takes the pool's locks (compaction mutex with
//! `try_lock`, one class or large-area lock at a time) and the engine's cluster locks, never
//! two pool locks at once, as compaction does. It blocks asynchronous signals, records its
//! stack as the pager's own, and calls no symbol the LD_PRELOAD library interposes except
//! `malloc` (served from the library's internal heap on a thread named `uswap-*`).

use crate::stats::inc;
use crate::store::RecompressPass;
use crate::Pager;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Swap-in faults per second above which a pass is put off.
pub(crate) const BUSY_SWAPINS_PER_S: u64 = 2000;

/// CPU time of the calling thread, ns.
fn thread_cpu_ns() -> u64 {
    crate::sys::cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
}

/// Lower the calling thread's priority to nice 19 (Linux: `setpriority` on a thread id sets
/// that thread's nice value only).
fn lower_priority() {
    // SAFETY: setpriority on our own thread id with a valid value.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, crate::cpu::gettid() as libc::id_t, 19) };
}

/// Should the pass due now be put off? `swapins` is the swap-in count at the last check,
/// `elapsed_ns` the time since.
fn busy(p: &Pager, swapins: u64, now_swapins: u64, elapsed_ns: u64) -> bool {
    let rate = now_swapins.saturating_sub(swapins).saturating_mul(1_000_000_000) / elapsed_ns.max(1);
    rate > BUSY_SWAPINS_PER_S || p.charged_bytes() > p.limit() || p.kswapd.stuck.load(Ordering::Relaxed)
}

/// One pass now, counted in the pager's statistics; returns what it did and its CPU time, ns.
pub(crate) fn pass(p: &Pager) -> (RecompressPass, u64) {
    let t0 = thread_cpu_ns();
    let r = p.store.recompress_idle();
    let cpu = thread_cpu_ns().saturating_sub(t0);
    let c = &p.counters;
    inc(&c.recomp_passes, 1);
    inc(&c.recomp_objects, r.objects);
    inc(&c.recomp_pages, r.pages);
    inc(&c.recomp_kept, r.kept);
    inc(&c.recomp_saved_bytes, r.saved_bytes);
    inc(&c.recomp_compacted_bytes, r.compacted_bytes);
    inc(&c.recomp_cpu_ns, cpu);
    (r, cpu)
}

/// Pages each tier move (writeback by age, promotion) takes at most per period (16 MiB).
pub(crate) const MOVE_PAGES: u64 = 4096;

/// Tiers both ways, one step (see the module doc): the store writes back what stayed in the
/// pool unused for `writeback_age_ms`, and promotes what was read back from the file since it
/// got there while the pool is under its cap (nine tenths of it, so promotion does not refill
/// what the reclaimer must empty).
pub(crate) fn tier_moves(p: &Pager) {
    let cap = if p.cfg.promote { p.pool_cap() / 10 * 9 } else { 0 };
    // In steps of 256 pages each way, stopping at a pause: a fork waits for this thread to
    // leave its pass (`Pager::quiesce`), and 4096 pages of file I/O on a loaded machine can
    // outlast the wait.
    let mut left = MOVE_PAGES;
    while left > 0 && !p.pause.load(Ordering::SeqCst) {
        let (written, promoted) = p.store.move_by_use(p.cfg.writeback_age_ms, cap, left.min(256));
        if written.max(promoted) == 0 {
            break;
        }
        left = left.saturating_sub(written.max(promoted));
    }
}

/// The recompressor's handshake with the rest of the pager (the pager's `recomp`).
#[derive(Default)]
pub(crate) struct Recomp {
    /// The futex word the thread sleeps on (woken by `Drop`).
    pub(crate) wake: AtomicU32,
    /// The thread is in a pass (or about to check [`Pager::quiesce`]'s pause).
    pub(crate) busy: AtomicBool,
    /// This pager holds the process's recompression passes off ([`Pager::quiesce`]).
    pub(crate) held: AtomicBool,
}

/// The recompressor thread's body (see the module doc). Returns when the pager stops.
pub(crate) fn recompressor(p: &Pager) {
    p.place.join();
    lower_priority();
    let period_ms = p.cfg.recompress_ms.max(1);
    let percent = u64::from(p.cfg.recompress_cpu_percent.clamp(1, 100));
    let ms = |n: u64| n.saturating_mul(1_000_000);
    let mut last = (crate::stats::now_ns(), p.counters.fault_swapin.load(Ordering::Relaxed));
    let mut due = last.0 + ms(period_ms);
    while !p.stop.load(Ordering::Acquire) {
        let v = p.recomp.wake.load(Ordering::Acquire);
        // This thread's thread vector stays pinned where glibc keeps it (`own`).
        crate::own::pin_thread_vector();
        let now = crate::stats::now_ns();
        if now < due {
            // Drop wakes us early (and the loop then ends).
            crate::sys::futex_wait(&p.recomp.wake, v, (due - now).div_ceil(1_000_000));
            continue;
        }
        let swapins = p.counters.fault_swapin.load(Ordering::Relaxed);
        // Busy before the pause is read (both SeqCst): a quiesce either sees us busy and waits,
        // or we see its pause.
        p.recomp.busy.store(true, Ordering::SeqCst);
        if p.pause.load(Ordering::SeqCst) || busy(p, last.1, swapins, now - last.0) {
            p.recomp.busy.store(false, Ordering::SeqCst);
            inc(&p.counters.recomp_deferred, 1);
            last = (now, swapins);
            due = now + ms(period_ms);
            continue;
        }
        let t0 = thread_cpu_ns();
        if p.store.recompress_configured() {
            pass(p);
        }
        tier_moves(p);
        let cpu = thread_cpu_ns().saturating_sub(t0);
        p.recomp.busy.store(false, Ordering::SeqCst);
        last = (crate::stats::now_ns(), p.counters.fault_swapin.load(Ordering::Relaxed));
        due = last.0 + ms(period_ms).max(cpu * 100 / percent);
    }
}
