//! Keeping to the limit on the fault path: a blocking fault reclaims first
//! ([`maybe_reclaim`]); a fault on the event thread that needs memory while the charge is over
//! the limit waits for the reclaimer instead ([`throttled`]: the caller retries it), for at
//! most [`THROTTLE_MAX_NS`], or for as long as a failing store holds faults (`stall`). A
//! program thread about to use memory no fault sees (a heap grown with `brk`, adopted at the
//! embedder's next reconciliation) waits for the reclaimer the same way ([`wait_for_room`]).
//!
//! Of the pager: the limit and charge, the configuration, the store's health, the background
//! reclaimer's futex and stuck flag (`kswapd`) and the counters.
//!
//! Locking: none of its own; [`maybe_reclaim`] runs direct reclaim ([`crate::reclaim`]),
//! which claims the pages it evicts. The rest is atomics and a futex wake.

use crate::page::kind;
use crate::reclaim;
use crate::region::RegionInner;
use crate::stats::{inc, now_ns};
use crate::{Pager, ReclaimMode, PAGE_SIZE};
use std::sync::atomic::Ordering;

/// How long a fault waits for the reclaimer before it is mapped over the limit anyway (so a
/// reclaimer that cannot make progress slows the program down but never hangs it).
pub(super) const THROTTLE_MAX_NS: u64 = 20_000_000;

/// How far over the limit the charge may go before faults wait for the reclaimer.
fn throttle_slack(p: &Pager) -> u64 {
    (p.limit() / 64).max(4 * p.cfg.folio_size as u64)
}

/// Before a blocking fault maps `need` bytes: reclaim directly when the charge would go over
/// the limit (in background mode, wake the reclaimer past its mark first), and while the store
/// fails, wait for room rather than map over the limit.
pub(super) fn maybe_reclaim(p: &Pager, need: u64) {
    let charged = p.charged_bytes();
    match p.cfg.reclaim {
        ReclaimMode::Direct => {
            if charged + need > p.limit() {
                reclaim::direct_reclaim(p, need);
            }
        }
        ReclaimMode::Background => {
            if charged + need > reclaim::wake_mark(p) {
                crate::sys::futex_wake(&p.kswapd.wake);
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

/// Before a program thread uses memory that takes no fault of the pager (its allocator grew a
/// heap with `brk`, which the embedder adopts at its next reconciliation, already resident):
/// while the charge is over the limit by more than a fault's slack, wake the reclaimer and
/// wait for it, as a throttled fault does, for at most [`THROTTLE_MAX_NS`] and not at all while
/// the reclaimer is stuck. Without it such a program runs as fast as it writes, and only the
/// reclaimer's speed bounds how far past the limit it gets. Holds nothing while it waits, and
/// leaves `errno` as it was (a sleep cut short by a signal sets it). Returns whether it waited.
/// [`Pager::wait_for_room`] calls it with the resident pages alone at half the limit or more.
#[cold]
pub(crate) fn wait_for_room(p: &Pager) -> bool {
    let over = || p.charged_bytes() > p.limit() + throttle_slack(p);
    let stuck = || p.kswapd.stuck.load(Ordering::Relaxed);
    if !over() || stuck() {
        return false;
    }
    inc(&p.counters.alloc_throttled, 1);
    // SAFETY: __errno_location returns the calling thread's errno, always valid.
    let errno = unsafe { *libc::__errno_location() };
    let t0 = now_ns();
    while over() && !stuck() && now_ns().saturating_sub(t0) < THROTTLE_MAX_NS {
        crate::sys::futex_wake(&p.kswapd.wake);
        crate::sys::sleep_ms(1);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    true
}

/// Whether a fault message on page `pg` of `r` must wait for the reclaimer (counted as
/// throttled; the caller retries it). `force`: the fault has waited long enough and is mapped
/// over the limit all the same; `wp`: a write-protect fault, which maps no new memory.
pub(super) fn throttled(p: &Pager, r: &RegionInner, pg: usize, force: bool, wp: bool) -> bool {
    let need = (PAGE_SIZE << r.folio_order) as u64;
    if !force && !wp {
        // Throttle: a page to map while the charge is over the limit waits for the reclaimer
        // (the fault is retried), so the limit holds within a few folios. With
        // `PagerConfig::lazy_background` the embedder starts the reclaimer as the charge nears
        // the limit (the preload's reconciler, within a pass; a fork child that inherits half its
        // limit starts it with its event thread); until then such a fault waits at most
        // `THROTTLE_MAX_NS` (not waiting at all would let a program that fills memory fast run
        // well past its limit before the reconciler's next pass).
        let charged = p.charged_bytes();
        if charged + need > reclaim::wake_mark(p) {
            crate::sys::futex_wake(&p.kswapd.wake);
        }
        let k = r.word(pg).load(Ordering::Acquire).kind();
        let needs_memory = matches!(k, kind::NONE | kind::SWAPPED | kind::CACHED);
        // While the store fails, a stuck reclaimer is what is expected: the fault waits for
        // room all the same, for as long as `stall` says.
        if needs_memory
            && charged + need > p.limit() + throttle_slack(p)
            && (!p.kswapd.stuck.load(Ordering::Relaxed) || p.health.holds_faults(now_ns(), p.cfg.full_wait_ms))
        {
            inc(&p.counters.fault_throttled, 1);
            return true;
        }
    } else if force && !wp && p.health.failing() {
        // Mapped over the limit because the store has failed for longer than faults wait.
        if p.charged_bytes() + need > p.limit() + throttle_slack(p) {
            inc(&p.counters.limit_breaks, 1);
        }
    }
    false
}
