//! Swap-out: what an evicted folio's words come to refer to. Storing a folio
//! ([`store_folio`], split in halves when the store has no contiguous range for it), dropping
//! the store references of SWAPPED words, and the tags of swap-cache copies that mark a clean
//! copy whose swap entries are kept ([`clean_tags`]). After the kernel's `mm/swap_state.c`
//! and `mm/page_io.c`. Shared by eviction, the inactive list's shrinking, region release and
//! the fault path.
//!
//! Locking: none of its own. A store call takes what the store takes (`crate::store`: the
//! engine's fault-path-safe locks, none held across managed memory); a cache tag is a relaxed
//! word of a cache object its caller has claimed.

use crate::page::{kind, PageWord};
use crate::stats::inc;
use crate::store::StoreError;
use crate::Pager;
use std::sync::atomic::Ordering;

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
pub(super) fn release_words(p: &Pager, words: &[PageWord]) {
    for &w in words {
        if w.kind() == kind::SWAPPED {
            p.store.put(w.payload(), 1);
        }
    }
}

/// Tag of a swap-cache page that is a clean folio's copy whose swap entries are kept (the
/// rest of the tag is the page's [`crate::page::clean_payload`]); see [`crate::arena::Arena::tag`].
pub(crate) const TAG_CLEAN: u64 = 1 << 63;

/// Tag bit of a swap-cache page that readahead brought in and no fault has taken yet (with
/// [`TAG_CLEAN`]: its entry is kept).
pub(crate) const TAG_AHEAD: u64 = 1 << 62;

/// How many of the `n` pages of cache object `o` readahead brought in ([`TAG_AHEAD`]).
pub(crate) fn ahead_pages(p: &Pager, o: crate::arena::Obj, n: usize) -> u64 {
    (0..n).filter(|&i| p.cache.tag(o, i).load(Ordering::Relaxed) & TAG_AHEAD != 0).count() as u64
}

/// The kept swap entries of the `n` pages of cache object `o`: `out[i]` is page `i`'s SWAPPED
/// word, or 0 when the cached copy is its only copy. Returns how many pages have one.
pub(crate) fn clean_tags(p: &Pager, o: crate::arena::Obj, n: usize, out: &mut [PageWord]) -> usize {
    let mut k = 0;
    for (i, w) in out.iter_mut().enumerate().take(n) {
        let t = p.cache.tag(o, i).load(Ordering::Relaxed);
        *w = if t & TAG_CLEAN != 0 {
            k += 1;
            PageWord::new(kind::CLEAN, 0, t & !(TAG_CLEAN | TAG_AHEAD)).clean_to_swapped()
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

/// A cached folio leaving the swap cache: if every page is a clean copy with its entry kept,
/// put their SWAPPED words in `words` and return true; otherwise drop whatever entries some
/// pages kept (the copy is what gets stored) and return false. Clears the tags either way.
pub(super) fn keep_or_forget_clean(p: &Pager, o: crate::arena::Obj, n: usize, words: &mut [PageWord]) -> bool {
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
