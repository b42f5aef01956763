//! The steps a fill shares once its pages are claimed and loaded: **copy** the data into
//! place ([`copy_runs`], `UFFDIO_COPY` run by run), **publish** the pages mapped
//! ([`publish`], `RESIDENT` or `CLEAN`, queued on the replacement lists), tell the workingset
//! of the refaults ([`note_refaults`]), and wake a faulting thread the fill did not map for
//! ([`wake_page`]).
//!
//! Of the pager: the uffd, the lists (`lru`: a mapped folio is queued there, a refault counted
//! against the workingset), the clean-page policy (`keep`), the configuration, the counters and the
//! resident page count (`charge`).
//!
//! Locking: none of its own. It works on pages the caller holds (`BUSY` through a [`Claim`]);
//! publishing queues them on the replacement lists (their rings' spinlocks).

use crate::page::{Claim, PageSet, PageWord};
use crate::reclaim;
use crate::region::{self, RegionInner};
use crate::stats::inc;
use crate::uffd::Filled;
use crate::{Pager, Replacement, PAGE_SIZE};
use std::sync::atomic::Ordering;

/// What a fill's claimed pages become when published.
#[derive(Copy, Clone)]
pub(super) enum Mapped<'k> {
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
pub(super) fn publish(
    p: &Pager,
    r: &RegionInner,
    first: usize,
    c: &mut Claim<'_>,
    how: Mapped<'_>,
    hot: bool,
) -> usize {
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
        p.lru.queue_mapped(&p.counters, r, pg, k, hot);
        count += 1 << k;
    });
    p.charge.resident_pages.fetch_add(count as i64, Ordering::AcqRel);
    inc(&p.counters.pages_mapped, count as u64);
    if !matches!(how, Mapped::Resident) {
        r.had_clean.store(true, Ordering::Relaxed);
        inc(&p.counters.clean_kept, count as u64);
        p.keep.kept(count as u64);
    }
    count
}

/// Workingset: page `first + i` (for each `swapped[i]`) came back from the store; see
/// `Workingset` (`reclaim/workingset.rs`).
pub(super) fn note_refaults(p: &Pager, r: &RegionInner, first: usize, swapped: impl Iterator<Item = bool>) {
    if p.cfg.replacement != Replacement::TwoList {
        return;
    }
    let win = reclaim::inactive_window(p);
    for (i, s) in swapped.enumerate() {
        if s {
            p.lru.ws.refault(r, first + i, win);
        }
    }
}

/// Wake the thread that faulted on page `pg` of `r` (message mode, `wake`), when the fault path
/// ends without mapping it itself: the page was unmapped meanwhile, found present, or kept
/// its word after the kernel refused it (the thread then retries the access).
pub(super) fn wake_page(p: &Pager, r: &RegionInner, pg: usize, wake: bool) {
    if wake {
        let _ = p.uffd.wake(r.addr(pg), PAGE_SIZE);
    }
}

/// What [`copy_runs`] did.
pub(super) struct Copied {
    /// Pages the kernel refused (the caller restores their words).
    pub(super) failed: PageSet,
    /// Some page of a run was present already (`EEXIST`), so not mapped by this copy: it holds
    /// what an earlier copy of this folio left, cut short by `EAGAIN` and rolled back, or what
    /// the program wrote there since, and it may be writable. The kernel's page is the truth
    /// then: the fill must publish it `RESIDENT` (freeing the entries), never `CLEAN`, whose
    /// kept entry would be stale once the program writes a page it was never made to fault on.
    pub(super) existed: bool,
}

/// Copy the runs of pages `c` holds in `[first, first + c.len())` from `src` (laid out like
/// the range) into place; `wp` maps them write-protected.
///
/// A run the kernel refuses whole (a folio that crosses into another mapping, e.g. the
/// `PROT_NONE` rest of a reservation: `UFFDIO_COPY` needs one VMA) is copied page by page.
/// Returns what it did, or `None` when an event is pending (`EAGAIN` on the event thread:
/// retry everything later; pages a partial copy mapped meanwhile stay mapped, see
/// [`Copied::existed`]).
pub(super) fn copy_runs(
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
