//! How many pages a fill takes: the region's sequential-fault tracker ([`seq_fault`]), the
//! stream rule for whole-folio swap-ins ([`STREAM_STEPS`], [`large_whole`]), and the
//! window of a 4 KiB fill ([`small_window`]: the region's folio, a readahead window in a 4 KiB
//! region, or the page), with the readahead counters (`swap_ra`, `swap_ra_hit`).
//!
//! Locking: none; the tracker and the readahead mark are relaxed atomics of the region
//! (a lost update only changes how much a later fill takes).

use crate::page::{kind, PageWord};
use crate::region::RegionInner;
use crate::stats::inc;
use crate::{Pager, SwapinPolicy};
use std::sync::atomic::Ordering;

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
/// only the faulting page. One step is not a stream: an object that straddles a page (or
/// folio) boundary faults twice in a row under random access too, and a whole swap-in would
/// then bring in the rest of a folio that nobody asked for; so do neighbouring objects faulted
/// in turn (a key's entry, key and value object in neighbouring folios). A stream pays two
/// 4 KiB faults at its start.
pub(super) const STREAM_STEPS: u32 = 2;

/// Whether the swap-in policy lets `r` swap in large folios whole.
fn large_ok(p: &Pager, r: &RegionInner) -> bool {
    match p.cfg.swapin {
        SwapinPolicy::Always => true,
        SwapinPolicy::Never => false,
        SwapinPolicy::Madvise => r.huge_hint.load(Ordering::Relaxed),
    }
}

/// A fault at `pg` on a large stored folio: whether to swap the folio in whole (the policy
/// allows it, and the faults are a stream or the pager is not adaptive) rather than only the
/// faulting page. Records the fault ([`seq_fault`]).
pub(super) fn large_whole(p: &Pager, r: &RegionInner, pg: usize) -> bool {
    let (_, streak) = seq_fault(r, pg);
    large_ok(p, r) && (!p.cfg.adaptive || streak >= STREAM_STEPS)
}

/// The pages `[first, first + n)` a zero-fill or 4 KiB swap-in at `pg` (state `w0`) tries to
/// take: the whole folio of the region when faults are sequential (a swap-in: a stream of
/// [`STREAM_STEPS`]; or not adaptive), a readahead window in 4 KiB regions, else just the
/// page. Records the fault ([`seq_fault`]) and counts a readahead hit (`swap_ra_hit`).
pub(super) fn small_window(p: &Pager, r: &RegionInner, pg: usize, w0: PageWord) -> (usize, usize) {
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
    (first, n)
}

/// A readahead window `[first, first + n)` swapped in `swapped` stored pages: count the pages
/// read ahead (`swap_ra`) and mark the window's end, so a fault right after it counts as a hit.
pub(super) fn readahead_done(p: &Pager, r: &RegionInner, first: usize, n: usize, swapped: u64) {
    inc(&p.counters.swap_ra, swapped - 1);
    r.ra_end.store(((first + n) << 16) | ((swapped - 1) as usize & 0xffff), Ordering::Relaxed);
}
