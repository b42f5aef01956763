//! The reclaim lists: the active list and the inactive list ([`Ring`]s of folio references),
//! the protected list ([`Protect`]) and its balance against the active list, and the folio
//! reference ([`entry`]) they all hold. [`Lru`] owns the three lists and the workingset state
//! ([`Workingset`]) that decides where a folio goes: the pager's one `lru` (the kernel's
//! `lruvec`).
//!
//! The active list holds mapped folios in the order they were mapped (user space sees no
//! accessed bits to rotate them by); the protected list, folios that came back hot
//! ([`super::workingset::refault_is_hot`]); the inactive list, folios demoted to the swap
//! cache. A reference names a region by slot and generation, so one whose region has gone
//! (or whose pages have moved on) is stale and skipped by whoever pops it.
//!
//! Locking: each list is a preallocated circular buffer behind a tiny spinlock held across
//! nothing but the push or pop itself (so a signal handler taking it cannot deadlock with
//! the thread it interrupted); a pop may give a page of the buffer back (one `madvise`) under
//! it. Nothing here allocates.
//!
//! Of the pager, nothing: [`Lru`]'s functions take the statistics' counters and the resident
//! page count they need from their callers.

use super::workingset::Workingset;
use crate::region::{self, RegionInner};
use crate::stats::{inc, Counters};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A bounded FIFO of folio references, preallocated. Its buffer is sized for the worst case
/// (twice the limit's pages plus a million entries, see `Pager::new`) and `MAP_NORESERVE`, so
/// it costs only the pages its entries use: a page the consumer has left with no live entry
/// in it is given back ([`Ring::pop`]). Otherwise the indices' walk round the buffer would
/// commit all of it over time, memory the preload counts as the program's outside the pager.
pub(crate) struct Ring {
    /// `mask + 1` entries (accessed under the spinlock).
    buf: crate::own::Mapping,
    mask: usize,
    head: AtomicUsize,
    tail: AtomicUsize,
    lock: AtomicBool,
}

impl Ring {
    /// A ring of `cap` entries (a power of two).
    pub(crate) fn new(cap: usize) -> std::io::Result<Ring> {
        let cap = cap.next_power_of_two();
        Ok(Ring {
            buf: crate::own::Mapping::new(cap * 8)?,
            mask: cap - 1,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            lock: AtomicBool::new(false),
        })
    }

    fn lock(&self) {
        while self.lock.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::hint::spin_loop();
        }
    }
    fn unlock(&self) {
        self.lock.store(false, Ordering::Release);
    }

    /// Append; false when full.
    pub(crate) fn push(&self, e: u64) -> bool {
        self.lock();
        let (h, t) = (self.head.load(Ordering::Relaxed), self.tail.load(Ordering::Relaxed));
        let ok = t - h <= self.mask;
        if ok {
            self.buf.atomic_words()[t & self.mask].store(e, Ordering::Relaxed);
            self.tail.store(t + 1, Ordering::Relaxed);
        }
        self.unlock();
        ok
    }

    /// Take the oldest entry.
    pub(crate) fn pop(&self) -> Option<u64> {
        self.lock();
        let (h, t) = (self.head.load(Ordering::Relaxed), self.tail.load(Ordering::Relaxed));
        let r = if h == t {
            None
        } else {
            let e = self.buf.atomic_words()[h & self.mask].load(Ordering::Relaxed);
            self.head.store(h + 1, Ordering::Relaxed);
            // The consumer has left a page of the buffer: give it back unless the producer
            // has wrapped round into it (entries [h + 1, t) are live). Under the lock, so no
            // push lands there meanwhile; one system call per page of entries.
            const WORDS: usize = 4096 / 8;
            let cap = self.mask + 1;
            if (h + 1).is_multiple_of(WORDS) && cap >= 2 * WORDS && t - (h + 1) <= cap - WORDS {
                self.buf.discard(((h + 1 - WORDS) & self.mask) * 8, 4096);
            }
            Some(e)
        };
        self.unlock();
        r
    }

    /// Entries queued (approximate without the lock).
    pub(crate) fn len(&self) -> usize {
        self.tail.load(Ordering::Relaxed).wrapping_sub(self.head.load(Ordering::Relaxed))
    }

    /// True when empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The protected list: mapped folios that came back soon after they were evicted.
///
/// The kernel keeps a hot page mapped because reclaim sees its accessed bit and rotates it;
/// user space sees no accessed bits (idle page tracking needs root and a kernel option), so
/// the active list is a FIFO by mapping order and every folio reaches its tail after one
/// pass, however often it is used. What user space does see is a page's refault distance:
/// the pages evicted between its eviction and its return ([`Workingset`]'s clock against
/// the page's shadow). A folio whose distance is under [`PROTECT_WINDOW_PERCENT`] of the
/// resident pages was used again soon after it left: it is mapped here instead of onto the
/// active list (`workingset_activate`). Reclaim takes folios from the active list (from here
/// only when that is empty); while this list holds more than [`PROTECT_TARGET_PERCENT`] of the
/// resident pages, its oldest folios move to the active list's tail (`pgdeactivate`), a second
/// pass before they can be evicted. The case it serves: a key-value store under requests for
/// uniformly random keys, whose dictionary entries, keys and object headers take a few pages
/// touched on every request, among values touched once in a long while.
///
/// [`Workingset`]: super::workingset::Workingset
/// [`PROTECT_WINDOW_PERCENT`]: super::workingset::PROTECT_WINDOW_PERCENT
pub(crate) struct Protect {
    ring: Ring,
    /// Pages of the folios queued (stale entries included until popped).
    pages: std::sync::atomic::AtomicI64,
}

impl Protect {
    /// A list of `cap` entries.
    pub(crate) fn new(cap: usize) -> std::io::Result<Protect> {
        Ok(Protect { ring: Ring::new(cap)?, pages: Default::default() })
    }

    /// Queue folio `e` (an [`entry`]); false when full.
    pub(crate) fn push(&self, e: u64) -> bool {
        let ok = self.ring.push(e);
        if ok {
            self.pages.fetch_add(1 << decode(e).3, Ordering::Relaxed);
        }
        ok
    }

    /// Take the oldest folio.
    pub(crate) fn pop(&self) -> Option<u64> {
        let e = self.ring.pop()?;
        self.pages.fetch_sub(1 << decode(e).3, Ordering::Relaxed);
        Some(e)
    }

    /// Pages queued.
    pub(crate) fn pages(&self) -> u64 {
        self.pages.load(Ordering::Relaxed).max(0) as u64
    }
}

/// Most pages the protected list keeps, in percent of the resident pages: most of them, so
/// a hot set mapped among cold pages stays mapped, but not all, so the active list keeps
/// room to give every other folio its pass, and a protected folio that has gone cold reaches
/// the active list and is evicted in its turn. Tuned, with [`PROTECT_WINDOW_PERCENT`], on
/// `uswap bench redis` (random GETs over three times the limit).
///
/// [`PROTECT_WINDOW_PERCENT`]: super::workingset::PROTECT_WINDOW_PERCENT
const PROTECT_TARGET_PERCENT: u64 = 80;

/// The pager's lists and the workingset state they share (the kernel's `lruvec`): mapped
/// folios on the active and protected lists, folios demoted to the swap cache on the inactive
/// list. Written by the fault path (a folio mapped or swapped in) and by reclaim.
pub(crate) struct Lru {
    /// Mapped folios in the order they were mapped.
    pub(crate) active: Ring,
    /// Mapped folios that came back soon after they were evicted (see [`Protect`]).
    pub(crate) protected: Protect,
    /// Folios demoted to the swap cache (unmapped, uncompressed).
    pub(crate) inactive: Ring,
    /// Refault distances and the bypass of the inactive stage.
    pub(crate) ws: Workingset,
}

impl Lru {
    /// Empty lists of `cap` entries each (a power of two).
    pub(crate) fn new(cap: usize) -> std::io::Result<Lru> {
        Ok(Lru {
            active: Ring::new(cap)?,
            protected: Protect::new(cap)?,
            inactive: Ring::new(cap)?,
            ws: Workingset::default(),
        })
    }

    /// Queue a folio just mapped: on the protected list when `hot` (and the two-list policy is
    /// on), else on the active list.
    pub(crate) fn queue_mapped(&self, counters: &Counters, r: &RegionInner, page: usize, order: u32, hot: bool) {
        let e = entry(r, page, order);
        if hot && self.protected.push(e) {
            inc(&counters.workingset_activate, 1u64 << order);
        } else {
            self.active.push(e);
        }
    }

    /// Keep the protected list at most [`PROTECT_TARGET_PERCENT`] of the `resident` pages: move
    /// its oldest folios to the active list's tail, at most `max_pages` pages.
    pub(super) fn balance_protected(&self, counters: &Counters, resident: u64, max_pages: usize) {
        let target = resident * PROTECT_TARGET_PERCENT / 100;
        let mut moved = 0usize;
        while moved < max_pages && self.protected.pages() > target {
            let Some(e) = self.protected.pop() else { break };
            let n = 1usize << decode(e).3;
            if !self.active.push(e) {
                self.protected.push(e);
                break;
            }
            inc(&counters.pgdeactivate, n as u64);
            moved += n;
        }
    }
}

/// Encode a folio reference: region slot and generation, first page, order.
#[inline]
pub(crate) fn entry(r: &RegionInner, page: usize, order: u32) -> u64 {
    entry_raw(r.slot, r.gen, page, order)
}

/// Encode a folio reference from its parts: slot (16 bits), generation (12,
/// [`region::GEN_MASK`]), order (4), first page (32).
#[inline]
pub(crate) fn entry_raw(slot: usize, gen: u32, page: usize, order: u32) -> u64 {
    (slot as u64 & 0xffff)
        | (u64::from(gen & region::GEN_MASK) << 16)
        | (u64::from(order & 0xf) << 28)
        | ((page as u64) << 32)
}

/// Decode a folio reference.
#[inline]
pub(crate) fn decode(e: u64) -> (usize, u32, usize, u32) {
    ((e & 0xffff) as usize, ((e >> 16) as u32) & region::GEN_MASK, (e >> 32) as usize, ((e >> 28) & 0xf) as u32)
}

/// Split the claimed pages of `[first, first + n)` (`claimed(i)`: page `first + i` is) into
/// naturally aligned power-of-two blocks; calls `f(page, order)` for each.
pub(crate) fn blocks(first: usize, n: usize, claimed: &dyn Fn(usize) -> bool, mut f: impl FnMut(usize, u32)) {
    let mut i = 0;
    while i < n {
        if !claimed(i) {
            i += 1;
            continue;
        }
        let mut k = (n.trailing_zeros()).min(((first + i) | (1 << 31)).trailing_zeros());
        loop {
            let len = 1usize << k;
            if i % len == 0 && i + len <= n && (i..i + len).all(claimed) {
                break;
            }
            k -= 1;
        }
        f(first + i, k);
        i += 1 << k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_fifo_and_bounded() {
        let r = Ring::new(4).unwrap();
        for i in 0..4 {
            assert!(r.push(i));
        }
        assert!(!r.push(9));
        assert_eq!(r.pop(), Some(0));
        assert!(r.push(4));
        let v: Vec<u64> = std::iter::from_fn(|| r.pop()).collect();
        assert_eq!(v, vec![1, 2, 3, 4]);
    }

    /// Resident pages of a ring's buffer.
    fn ring_resident_pages(r: &Ring) -> usize {
        (crate::arena::tests::resident(r.buf.as_ptr() as usize, (r.mask + 1) * 8) / 4096) as usize
    }

    #[test]
    fn a_ring_gives_back_the_pages_its_consumer_has_left() {
        // 64 pages of entries; a queue of at most 1000 entries streamed through it 20 times.
        let r = Ring::new(64 * 512).unwrap();
        let (mut next_in, mut next_out) = (0u64, 0u64);
        while next_in < 20 * 64 * 512 {
            while next_in - next_out < 1000 {
                assert!(r.push(next_in));
                next_in += 1;
            }
            for _ in 0..700 {
                assert_eq!(r.pop(), Some(next_out));
                next_out += 1;
            }
        }
        let held = ring_resident_pages(&r);
        assert!(held <= 4, "{held} of 64 pages resident with {} entries queued", next_in - next_out);
        // A producer that has wrapped round into the page the consumer leaves: that page keeps
        // its new entries.
        let r = Ring::new(4 * 512).unwrap();
        let mut want = std::collections::VecDeque::new();
        for i in 0..4 * 512 {
            assert!(r.push(i));
            want.push_back(i);
        }
        for _ in 0..511 {
            assert_eq!(r.pop(), want.pop_front());
        }
        for i in 0..511 {
            assert!(r.push(1 << 32 | i));
            want.push_back(1 << 32 | i);
        }
        while let Some(w) = want.pop_front() {
            assert_eq!(r.pop(), Some(w));
        }
        assert_eq!(r.pop(), None);
    }

    #[test]
    fn blocks_cover_claimed_pages_with_aligned_pieces() {
        let check = |first: usize, n: usize, set: &[usize]| {
            let claimed = |i: usize| set.contains(&i);
            let mut seen = vec![];
            blocks(first, n, &claimed, |pg, k| {
                assert_eq!((pg - first) % (1 << k), 0);
                assert_eq!(pg % (1 << k), 0, "aligned in the region");
                for q in pg..pg + (1 << k) {
                    seen.push(q - first);
                }
            });
            let mut want: Vec<usize> = set.to_vec();
            want.sort();
            assert_eq!(seen, want);
        };
        check(0, 16, &(0..16).collect::<Vec<_>>());
        check(16, 16, &[0, 1, 2, 3, 5, 8, 9, 10, 11, 12, 13, 14, 15]);
        check(0, 1, &[0]);
        check(512, 512, &(1..512).collect::<Vec<_>>());
    }

    #[test]
    fn entries_roundtrip() {
        let e = entry_raw(crate::region::MAX_REGIONS - 1, 0xffe, 123_456, 4);
        assert_eq!(decode(e), (crate::region::MAX_REGIONS - 1, 0xffe, 123_456, 4));
        let e = entry_raw(5, 0, usize::from(u16::MAX) << 8, 9);
        assert_eq!(decode(e), (5, 0, usize::from(u16::MAX) << 8, 9));
    }
}
