//! The background reclaimer (`ReclaimMode::Background`, the thread `uswap-kswapd`) and its
//! watermarks: the fault path wakes it at [`wake_mark`], and it reclaims down to a low
//! watermark below that, writes back what the compressed pool holds over its cap, moves the
//! pool's share of the limit ([`crate::pool_share`]) and takes back swap-file clusters a fork
//! relative gave up. When it fails to make progress for [`STUCK_AFTER_NS`] it says so
//! ([`Kswapd::stuck`]), and faults stop waiting for it. After the kernel's `kswapd` in
//! `mm/vmscan.c`.
//!
//! Locking: it reclaims between [`region::enter`] and [`region::leave`] (with what
//! [`reclaim_batch`] takes); the pool's writeback runs outside them. It sleeps on the
//! [`Kswapd::wake`] futex, and stops between batches while a fork pauses it (`Pager::pause`,
//! answered through [`Kswapd::quiet`]).
//!
//! Of the pager: its handshake with this thread is [`Kswapd`], the pager's `kswapd`; the
//! thread also reads the configuration, the limit and charge, the stop and pause flags, and
//! drives the store, the pool's share and [`reclaim_batch`].

use crate::region;
use crate::stats::inc;
use crate::{Pager, PAGE_SIZE};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::shrink::reclaim_batch;

/// The background reclaimer's handshake with the rest of the pager (the pager's `kswapd`).
pub(crate) struct Kswapd {
    /// The futex word it sleeps on: woken by faults past [`wake_mark`], by adoption, by a
    /// lowered limit, by a fork's quiesce and resume, and by `Drop`.
    pub(crate) wake: AtomicU32,
    /// It is paused or not running (what `Pager::quiesce` waits for).
    pub(crate) quiet: AtomicBool,
    /// It has not lowered the charge for [`STUCK_AFTER_NS`] (nothing evictable: faults stop
    /// waiting for it).
    pub(crate) stuck: AtomicBool,
}

impl Default for Kswapd {
    fn default() -> Self {
        Kswapd { wake: AtomicU32::new(0), quiet: AtomicBool::new(true), stuck: AtomicBool::new(false) }
    }
}

/// The background reclaimer (`ReclaimMode::Background`): keeps the charge under a low
/// watermark, sleeping on a futex the fault path wakes.
pub(crate) fn kswapd(p: &Pager) {
    p.place.join();
    // The low watermark follows the limit in force (Pager::set_limit).
    let low = |limit: u64| limit - (limit / 16).max((p.cfg.reclaim_batch * PAGE_SIZE * 2) as u64).min(limit / 2);
    p.kswapd.quiet.store(false, Ordering::SeqCst);
    let mut refresh_at = 0;
    // When the current run of passes without progress began (0: the last pass made some).
    let mut failing_since = 0u64;
    let mut share = crate::pool_share::PoolShare::default();
    while !p.stop.load(Ordering::Acquire) {
        if p.charge.pool_capped && p.cfg.pool_adapt {
            let cur = p.charge.pool_permille.load(Ordering::Relaxed);
            if let Some(next) = share.update(crate::stats::now_ns(), p.store.tier_refaults(), cur) {
                p.set_pool_share(next);
                inc(&p.counters.pool_share_moves, 1);
            }
        }
        if p.pause.load(Ordering::SeqCst) {
            p.kswapd.quiet.store(true, Ordering::SeqCst);
            while p.pause.load(Ordering::SeqCst) && !p.stop.load(Ordering::Acquire) {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            p.kswapd.quiet.store(false, Ordering::SeqCst);
            continue;
        }
        let v = p.kswapd.wake.load(Ordering::Acquire);
        // This thread's thread vector stays pinned where glibc keeps it (`own`).
        crate::own::pin_thread_vector();
        let mut n = 0;
        // A pool far over its cap goes to the file first, coldest objects first, even under
        // the low mark, down to half as much again as its cap: the cap is the pool's share of
        // the limit, and what it holds over it is taken from the resident pages, where the
        // working set would thrash (data that does not compress fills a pool fast). Not down
        // to the cap itself: the pool gives memory back only as whole pages empty, so a pool
        // a little over it would be written back to nothing. Bounded like the reclaim below.
        let pool_high = p.pool_cap() + p.pool_cap() / 2;
        while p.charge.pool_capped
            && !p.pause.load(Ordering::SeqCst)
            && n < 32
            && p.store.shrink_ram(pool_high, 256) > 0
        {
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
        while p.charge.pool_capped
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
        // flight, or its folios written while being evicted, see `evict::EVICT_TRIES`), and every
        // fault let through meanwhile maps a folio over the limit.
        if n > 0 || p.charged_bytes() <= low(p.limit()) {
            failing_since = 0;
            p.kswapd.stuck.store(false, Ordering::Relaxed);
        } else {
            if failing_since == 0 {
                failing_since = now;
            }
            p.kswapd.stuck.store(now - failing_since >= STUCK_AFTER_NS, Ordering::Relaxed);
        }
        if n == 0 {
            crate::sys::futex_wait(&p.kswapd.wake, v, 20);
        }
    }
    p.kswapd.quiet.store(true, Ordering::SeqCst);
}

/// How long the background reclaimer must fail to make progress, over its low watermark,
/// before faults stop waiting for it ([`Kswapd::stuck`]): half the longest a single
/// fault waits ([`crate::fault`]'s `THROTTLE_MAX_NS`), so a stuck reclaimer costs the faults
/// of that window at most 20 ms each, once.
const STUCK_AFTER_NS: u64 = 10_000_000;

/// The low watermark at which the fault path wakes the background reclaimer.
pub(crate) fn wake_mark(p: &Pager) -> u64 {
    let limit = p.limit();
    limit - (limit / 32).max((p.cfg.reclaim_batch * PAGE_SIZE) as u64).min(limit / 4)
}
