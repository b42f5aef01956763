//! Workingset detection: the reclaim clock, the shadows evicted pages leave
//! ([`RegionInner::shadow`]) and their refault distance, which decides two things: whether a
//! page swapped back in is hot ([`refault_is_hot`]: it goes on the protected list), and
//! whether the inactive stage is worth its cost ([`Workingset`]'s bypass). After the kernel's
//! `mm/workingset.c`.
//!
//! Locking: none; the clock and the counters are relaxed atomics (a lost race only blurs a
//! statistic), and a shadow is a relaxed word of its page.
//!
//! Of the pager: [`Workingset`] is its `lru.ws`; [`refault_is_hot`] and [`inactive_window`]
//! read the replacement policy and the inactive share of its configuration, its resident
//! page count (`charge`) and its limit.

use crate::region::RegionInner;
use crate::{Pager, Replacement, PAGE_SIZE};
use std::sync::atomic::{AtomicBool, Ordering};

/// Workingset detection for the two-list policy: how many demoted pages come back while the
/// inactive list would still hold them. When almost none do (a streaming or uniformly random
/// workload), the inactive stage only costs a copy and a minor fault, so reclaim bypasses it,
/// evicting active folios straight to the store like FIFO.
///
/// While bypassed, it keeps measuring the way the kernel's `mm/workingset.c` does, with
/// shadows instead of samples: each page evicted straight to the store gets the reclaim
/// clock (pages that left the active list so far) as its shadow ([`RegionInner::shadow`]);
/// when it is swapped back in, a refault distance (clock now − shadow) within the inactive list's size means the
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
    pub(super) fn distance(&self, shadow: u32) -> Option<u64> {
        (shadow != 0).then(|| u64::from((self.clock.load(Ordering::Relaxed) as u32).wrapping_sub(shadow)))
    }
    /// Advance the clock by `n` evicted pages; returns the stamp for their shadows (never 0).
    pub(super) fn tick(&self, n: u64) -> u32 {
        ((self.clock.fetch_add(n, Ordering::Relaxed) + n) as u32).max(1)
    }
    /// Pages demoted into the swap cache; re-decides the bypass once per `window` pages.
    pub(super) fn demoted(&self, n: u64, window: u64) {
        let d = self.demoted.fetch_add(n, Ordering::Relaxed) + n;
        if d >= window {
            let h = self.hits.swap(0, Ordering::Relaxed);
            self.demoted.store(0, Ordering::Relaxed);
            // A demotion costs a copy of the page; a refault it turns from major to minor
            // saves a swap-in (a decompression, and for a written page the compression at its
            // next eviction), several copies' worth. Under one refault per 8 demoted pages the
            // inactive list costs more than it saves.
            self.bypass.store(h * 8 < d, Ordering::Relaxed);
        }
    }
    /// True while the inactive stage is bypassed.
    pub(crate) fn bypassed(&self) -> bool {
        self.bypass.load(Ordering::Relaxed)
    }
}

/// Most refault distance of a hot page, in percent of the resident pages: a page back this
/// soon was used again within a fraction of one pass of the active list, which a FIFO by
/// mapping order cannot see (see [`Protect`]). Tuned with the protected list's target
/// (`lru::PROTECT_TARGET_PERCENT`).
///
/// [`Protect`]: super::lru::Protect
pub(super) const PROTECT_WINDOW_PERCENT: u64 = 25;

/// Whether page `pg` of `r`, being swapped back in, is hot: its refault distance is under
/// [`PROTECT_WINDOW_PERCENT`] of the resident pages. Reads the shadow without clearing it
/// ([`Workingset::refault`] does).
pub(crate) fn refault_is_hot(p: &Pager, r: &RegionInner, pg: usize) -> bool {
    if p.cfg.replacement != Replacement::TwoList || pg >= r.npages {
        return false;
    }
    let window = resident_percent(p, PROTECT_WINDOW_PERCENT).max(64);
    p.lru.ws.distance(r.shadow(pg).load(Ordering::Relaxed)).is_some_and(|d| d <= window)
}

/// `percent` % of the pages resident now.
pub(super) fn resident_percent(p: &Pager, percent: u64) -> u64 {
    p.charge.resident_pages.load(Ordering::Relaxed).max(0) as u64 * percent / 100
}

/// Pages the inactive list holds at its target size (the workingset window).
pub(crate) fn inactive_window(p: &Pager) -> u64 {
    (p.limit() * u64::from(p.cfg.inactive_percent) / 100 / PAGE_SIZE as u64).max(64)
}
