//! How many pages a fill takes: the region's sequential-fault tracker ([`seq_fault`]), the
//! stream rule for whole-folio swap-ins ([`STREAM_STEPS`], [`large_whole`]), and the
//! window of a 4 KiB fill ([`small_window`]: the region's folio, a readahead window in a 4 KiB
//! region, or the page), with the readahead counters (`swap_ra`, `swap_ra_hit`); and the
//! window of a random 4 KiB swap-in from a tier outside RAM ([`ahead_window`]: the kernel's
//! `swap_vma_readahead`, sized by its hits, [`AheadTracker`]).
//!
//! Locking: none; the trackers and the readahead mark are relaxed atomics of the region or
//! the pager (a lost update only changes how much a later fill takes).

use crate::page::{kind, PageWord, CLEAN_MAX_ENTRY};
use crate::region::RegionInner;
use crate::stats::inc;
use crate::{Pager, SwapinPolicy};
use std::sync::atomic::{AtomicU64, Ordering};

/// Probes before the hit rate decides.
const AHEAD_WARMUP: u64 = 64;
/// Past this many probes, both counts are halved: the rate follows the recent past.
const AHEAD_DECAY: u64 = 1024;
/// Below a hit rate of 1/`AHEAD_MIN_RATE`, only one fault in [`AHEAD_PROBE`] reads ahead.
const AHEAD_MIN_RATE: u64 = 4;
/// With a poor hit rate, one fault in this many still reads ahead, so the rate stays measured
/// and readahead comes back when the access pattern changes.
const AHEAD_PROBE: u64 = 16;

/// Whether readahead from a tier outside RAM pays: of the probes it put into the swap cache
/// lately (one page per window; the others are mapped, and their use cannot be seen), how
/// many a fault then took from there. A swap-in from a file waits for the device whatever it
/// reads along, so a page read ahead costs no wait, only room in memory until reclaim drops it
/// (clean, no write).
pub(crate) struct AheadTracker {
    /// Probes read ahead (decayed).
    issued: AtomicU64,
    /// Of them, probes a fault took from the swap cache (decayed with `issued`).
    hits: AtomicU64,
    /// Faults that asked while the rate was poor (one in [`AHEAD_PROBE`] reads ahead).
    asked: AtomicU64,
    /// Where in its window the next fault's probe is (rotates, so that the probes sample
    /// every distance from the faulting page).
    probe_at: AtomicU64,
}

impl AheadTracker {
    pub(crate) const fn new() -> AheadTracker {
        AheadTracker {
            issued: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            asked: AtomicU64::new(0),
            probe_at: AtomicU64::new(0),
        }
    }

    /// Where the probe of a window of `n` pages starts looking (the first page read ahead
    /// from there on, round the window).
    pub(super) fn probe_at(&self, n: usize) -> usize {
        (self.probe_at.fetch_add(5, Ordering::Relaxed) as usize) % n
    }

    /// `n` probes went to the swap cache.
    pub(super) fn read_ahead(&self, n: u64) {
        let i = self.issued.fetch_add(n, Ordering::Relaxed) + n;
        if i > AHEAD_DECAY {
            self.issued.store(i / 2, Ordering::Relaxed);
            self.hits.store(self.hits.load(Ordering::Relaxed) / 2, Ordering::Relaxed);
        }
    }

    /// A fault took `n` probes from the swap cache.
    pub(super) fn hit(&self, n: u64) {
        self.hits.fetch_add(n, Ordering::Relaxed);
    }

    /// Whether this fault reads ahead.
    fn wanted(&self) -> bool {
        let i = self.issued.load(Ordering::Relaxed);
        if i < AHEAD_WARMUP || self.hits.load(Ordering::Relaxed) * AHEAD_MIN_RATE >= i {
            return true;
        }
        self.asked.fetch_add(1, Ordering::Relaxed).is_multiple_of(AHEAD_PROBE)
    }
}

/// Whether `w` is a 4 KiB page stored (its entry keepable clean) on a tier outside RAM: what
/// [`ahead_window`] reads ahead for, and the pages of its window it reads along.
pub(super) fn stored_on_file(p: &Pager, w: PageWord) -> bool {
    w.kind() == kind::SWAPPED && w.order() == 0 && w.payload() < CLEAN_MAX_ENTRY && p.store.on_file(w.payload())
}

/// The window `[first, first + n)` a random 4 KiB swap-in at `pg` (state `w0`, one page by
/// [`small_window`]) reads ahead, when its data is on a tier outside RAM: the aligned window
/// of `file_readahead_pages` around it (the region's folio if smaller), while readahead pays
/// ([`AheadTracker`]). `None`: read the page alone.
pub(super) fn ahead_window(p: &Pager, r: &RegionInner, pg: usize, w0: PageWord) -> Option<(usize, usize)> {
    let win = p.cfg.file_readahead_pages.min(uswap::SWAP_IN_BATCH);
    if win < 2 || !stored_on_file(p, w0) || !p.ahead.wanted() {
        return None;
    }
    let fp = 1usize << r.folio_order;
    let w = if fp > 1 { fp.min(win) } else { win };
    let w = 1usize << w.ilog2();
    let first = pg & !(w - 1);
    Some((first, w.min(r.npages - first)))
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
