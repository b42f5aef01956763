//! Clean pages: the policy that decides whether a swap-in keeps its swap entry
//! ([`KeepClean`]), and the write fault that ends a page's clean state ([`unclean`]).
//!
//! A swap-in for a read may keep the page's swap entry and map it write-protected (`CLEAN`);
//! the first write then faults, and [`unclean`] frees the entries of the folio's clean pages
//! and lifts their protection, so the store never holds a stale copy of a mapped page.
//!
//! Locking: [`KeepClean`] is atomics only. [`unclean`] claims the folio's `CLEAN` pages
//! through a [`Claim`] (CAS to `BUSY`, see [`crate::page`]) and puts their entries in the
//! store (the engine locks of `put`).

use crate::page::{kind, Claim, PageWord};
use crate::region::{self, RegionInner};
use crate::stats::inc;
use crate::{Pager, PAGE_SIZE};
use std::sync::atomic::Ordering;

/// Clean-page retention: whether a read fault's swap-in keeps the page's swap entry, mapping the
/// page write-protected (`CLEAN`) so that evicting it again costs one `MADV_DONTNEED` instead of
/// a write-protect, a compression and a store. The price is a write-protect fault when the page
/// is written later, and the entry's pool memory for as long as the page is mapped. So, like
/// the kernel (which frees the slot of a folio mapped writable, or when swap is half full):
/// - only read faults keep. In both fault modes: in thread mode the later write costs a
///   hand-off to the event thread, but evicting a page that was written costs more (a
///   write-protect with its TLB-flush IPIs, a compression, a store and often a file write),
///   and a program that thrashes mostly re-reads;
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
pub(super) fn unclean(p: &Pager, r: &RegionInner, pg: usize, w0: PageWord, wake: bool) -> bool {
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
