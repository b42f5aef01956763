//! Page words and page claims: the pager's page table at its lowest level, knowing nothing of
//! regions, lists or stores.
//!
//! Every 4 KiB page of a region has one 64-bit state word, a [`PageWord`] (kept in an
//! [`AtomicPageWord`], in the region's `MAP_NORESERVE` array of them):
//!
//! ```text
//!  63                                 8 7 6   3 2   0
//! +------------------------------------+-+-----+-----+
//! |              PAYLOAD               |R|ORDER|KIND |
//! +------------------------------------+-+-----+-----+
//! ```
//! KIND: `NONE` (never populated or discarded: a fault zero-fills), `RESIDENT` (mapped; ORDER is
//! the folio it was mapped with and is queued as), `BUSY` (locked by one thread that is filling
//! or evicting it), `CACHED` (unmapped, uncompressed copy in the swap cache: PAYLOAD is the
//! cache object, ORDER the cached piece), `SWAPPED` (PAYLOAD is this page's swap entry, ORDER
//! the stored folio it belongs to), `CLEAN` (mapped write-protected and unchanged since it was
//! swapped in, so it still has its swap entry: PAYLOAD is [`clean_payload`] of that entry and
//! the stored folio's order, ORDER the folio it was mapped with, as for `RESIDENT`; evicting it
//! writes nothing, and the first write takes a write-protect fault that frees the entry),
//! `UNMAPPED` (the program unmapped it: lookups pass over it, and dropping the region leaves
//! that address alone). R marks a page brought in by readahead.
//!
//! A [`Claim`] takes a run of pages for one thread: it CASes each page it wants from the word
//! it saw to `BUSY`, remembers the old words (in memory its caller lends it: 4 KiB for a 2 MiB
//! folio is too much for a signal handler's stack), and either publishes each page's next
//! state or, when dropped unpublished, rolls every page it still holds back to its old word.
//! The claim works on any [`WordCell`]: a region's words in mmap'ed memory in the pager, loom's
//! atomics in the models (`tests/loom_claim.rs`).
//!
//! Locking: a page changes state only by CAS. `BUSY` is the per-page lock: a thread that CASes a
//! page to `BUSY` owns it until it publishes the next state (a `Release` store that the next
//! owner's `Acquire` CAS or load pairs with); no thread ever waits for a `BUSY` page while it
//! holds other `BUSY` pages (claims are all-or-nothing where they must be, and rolled back), so
//! there is no lock-order deadlock.

use std::sync::atomic::{AtomicU64, Ordering};

/// Page state kinds (the KIND field of a [`PageWord`]).
pub mod kind {
    /// Never populated, or discarded: a fault zero-fills.
    pub const NONE: u64 = 0;
    /// Mapped.
    pub const RESIDENT: u64 = 1;
    /// Locked by a thread filling or evicting it.
    pub const BUSY: u64 = 2;
    /// Unmapped, uncompressed in the swap cache (inactive list).
    pub const CACHED: u64 = 3;
    /// Stored in the page store.
    pub const SWAPPED: u64 = 4;
    /// Mapped write-protected, unchanged since swap-in: the store still holds its data (the
    /// kernel's clean folio in the swap cache that keeps its slot).
    pub const CLEAN: u64 = 5;
    /// Unmapped by the program (`munmap`, `mremap` away): the address is not the region's any
    /// more, and may be somebody else's mapping now.
    pub const UNMAPPED: u64 = 6;
}

/// Swap entries a `CLEAN` payload can carry (below 2^48; the store's entries are slot
/// indices, far below).
pub const CLEAN_MAX_ENTRY: u64 = 1 << 48;

/// Payload of a `CLEAN` word: the page's swap entry and the order of the stored folio it
/// belongs to (needed to rebuild its `SWAPPED` word on eviction).
#[inline]
pub fn clean_payload(entry: u64, stored_order: u32) -> u64 {
    debug_assert!(entry < CLEAN_MAX_ENTRY);
    entry | (u64::from(stored_order) << 48)
}

/// One page's state word (see the module documentation for the layout). Any 64 bits are a
/// `PageWord` (an unknown kind is matched by nobody), so it can be read from any memory.
#[repr(transparent)]
#[derive(Copy, Clone, PartialEq, Eq, Default)]
pub struct PageWord(u64);

impl PageWord {
    /// `NONE`: zero-fill on the next fault.
    pub const NONE: PageWord = PageWord(kind::NONE);
    /// `BUSY` with no payload: a fill, a release, or anything else holding the page.
    pub const BUSY: PageWord = PageWord(kind::BUSY);
    /// `BUSY` held by an eviction that is copying the page out (still mapped, write-protected):
    /// a missing-page fault on it means the program dropped the page under the copy.
    pub const BUSY_COPY: PageWord = PageWord(kind::BUSY | (1 << 8));
    /// `BUSY` held by an eviction that is dropping the page (`MADV_DONTNEED`): a `REMOVE`
    /// event on it is the pager's own.
    pub const BUSY_DROP: PageWord = PageWord(kind::BUSY | (2 << 8));
    /// `BUSY_COPY` being taken back from its eviction by a fault (`fault::take_back`): the
    /// faulting path lifts the page's write protection to let a write through (thread fault
    /// mode), or maps zeros where the program dropped the page. The eviction sees this word
    /// instead of `BUSY_COPY` when it comes to drop the page and gives the page's block up
    /// (`reclaim::drop_pages`), but does not publish the page while the word is this one: the
    /// fault path's ioctl may not have run yet, and run on a page republished and taken by
    /// another eviction, it would lift that one's protection, or map zeros over a page it
    /// has just dropped.
    pub const BUSY_WANTED: PageWord = PageWord(kind::BUSY | (3 << 8));
    /// `BUSY_WANTED` whose fault path is done with the page: the eviction may publish it.
    pub const BUSY_HANDED: PageWord = PageWord(kind::BUSY | (4 << 8));
    /// `UNMAPPED`: the program unmapped the page.
    pub const UNMAPPED: PageWord = PageWord(kind::UNMAPPED);

    /// A word from its fields.
    #[inline]
    pub const fn new(kind: u64, order: u32, payload: u64) -> PageWord {
        PageWord(kind | ((order as u64) << 3) | (payload << 8))
    }
    /// `RESIDENT`, mapped as (and queued as) a folio of `order`.
    #[inline]
    pub const fn resident(order: u32) -> PageWord {
        PageWord::new(kind::RESIDENT, order, 0)
    }
    /// `SWAPPED`: swap entry `entry`, of a stored folio of `order`.
    #[inline]
    pub const fn swapped(order: u32, entry: u64) -> PageWord {
        PageWord::new(kind::SWAPPED, order, entry)
    }
    /// `CACHED`: a piece of `order` cached in swap-cache object `obj` (in granules).
    #[inline]
    pub const fn cached(order: u32, obj: u64) -> PageWord {
        PageWord::new(kind::CACHED, order, obj)
    }
    /// `CLEAN`: mapped as a folio of `order`, keeping swap entry `entry` of a stored folio of
    /// `stored_order`.
    #[inline]
    pub fn clean(order: u32, entry: u64, stored_order: u32) -> PageWord {
        PageWord::new(kind::CLEAN, order, clean_payload(entry, stored_order))
    }
    /// The word with these bits (the models' view of a raw cell).
    #[cfg(any(test, loom))]
    #[inline]
    pub const fn from_bits(bits: u64) -> PageWord {
        PageWord(bits)
    }
    /// The word's bits.
    #[cfg(any(test, loom))]
    #[inline]
    pub const fn bits(self) -> u64 {
        self.0
    }
    /// KIND (one of [`kind`]).
    #[inline]
    pub const fn kind(self) -> u64 {
        self.0 & 7
    }
    /// ORDER.
    #[inline]
    pub const fn order(self) -> u32 {
        ((self.0 >> 3) & 0xf) as u32
    }
    /// PAYLOAD.
    #[inline]
    pub const fn payload(self) -> u64 {
        self.0 >> 8
    }
    /// `BUSY`, whoever holds it.
    #[inline]
    pub const fn is_busy(self) -> bool {
        self.kind() == kind::BUSY
    }
    /// Mapped (`RESIDENT` or `CLEAN`): the page is on the active list and charged as resident.
    #[inline]
    pub const fn is_mapped(self) -> bool {
        matches!(self.kind(), kind::RESIDENT | kind::CLEAN)
    }
    /// The swap entry of a `CLEAN` word.
    #[inline]
    pub const fn clean_entry(self) -> u64 {
        self.payload() & (CLEAN_MAX_ENTRY - 1)
    }
    /// The `SWAPPED` word a `CLEAN` word becomes when its page is dropped (its entry and
    /// stored order).
    #[inline]
    pub const fn clean_to_swapped(self) -> PageWord {
        PageWord::swapped(((self.payload() >> 48) & 0xf) as u32, self.clean_entry())
    }
}

impl std::fmt::Debug for PageWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (k, pl) = (self.order(), self.payload());
        match self.kind() {
            kind::NONE if self.0 == 0 => write!(f, "NONE"),
            kind::RESIDENT => write!(f, "RESIDENT(order {k})"),
            kind::BUSY if *self == PageWord::BUSY_COPY => write!(f, "BUSY_COPY"),
            kind::BUSY if *self == PageWord::BUSY_DROP => write!(f, "BUSY_DROP"),
            kind::BUSY if *self == PageWord::BUSY_WANTED => write!(f, "BUSY_WANTED"),
            kind::BUSY if *self == PageWord::BUSY_HANDED => write!(f, "BUSY_HANDED"),
            kind::BUSY if *self == PageWord::BUSY => write!(f, "BUSY"),
            kind::CACHED => write!(f, "CACHED(order {k}, obj {pl:#x})"),
            kind::SWAPPED => write!(f, "SWAPPED(order {k}, entry {pl:#x})"),
            kind::CLEAN => write!(
                f,
                "CLEAN(order {k}, entry {:#x}, stored order {})",
                self.clean_entry(),
                self.clean_to_swapped().order()
            ),
            kind::UNMAPPED if self.0 == kind::UNMAPPED => write!(f, "UNMAPPED"),
            _ => write!(f, "PageWord({:#x})", self.0),
        }
    }
}

/// Where a page word lives: what a [`Claim`] CASes and stores. The pager's region words
/// are [`AtomicPageWord`]s; under `--cfg loom` the shim's `AtomicU64` is one too, for the models.
pub trait WordCell {
    /// Store `w`.
    fn store(&self, w: PageWord, order: Ordering);
    /// Replace `current` with `new` if the word is still `current`; returns the word seen.
    fn compare_exchange(
        &self,
        current: PageWord,
        new: PageWord,
        success: Ordering,
        failure: Ordering,
    ) -> Result<PageWord, PageWord>;
}

/// An atomic [`PageWord`]: an `AtomicU64` (always `std`'s: it lives in mmap'ed memory, which
/// loom's atomics cannot), read and written as page words.
#[repr(transparent)]
#[derive(Default)]
pub struct AtomicPageWord(AtomicU64);

impl AtomicPageWord {
    /// A cell holding `w`.
    #[cfg(test)]
    pub const fn new(w: PageWord) -> AtomicPageWord {
        AtomicPageWord(AtomicU64::new(w.0))
    }
    /// Load the word.
    #[inline]
    pub fn load(&self, order: Ordering) -> PageWord {
        PageWord(self.0.load(order))
    }
    /// Store `w`.
    #[inline]
    pub fn store(&self, w: PageWord, order: Ordering) {
        self.0.store(w.0, order)
    }
    /// Store `w`, returning the word it replaced.
    #[inline]
    pub fn swap(&self, w: PageWord, order: Ordering) -> PageWord {
        PageWord(self.0.swap(w.0, order))
    }
    /// Replace `current` with `new` if the word is still `current`; returns the word seen.
    #[inline]
    pub fn compare_exchange(
        &self,
        current: PageWord,
        new: PageWord,
        success: Ordering,
        failure: Ordering,
    ) -> Result<PageWord, PageWord> {
        self.0.compare_exchange(current.0, new.0, success, failure).map(PageWord).map_err(PageWord)
    }
}

impl WordCell for AtomicPageWord {
    #[inline]
    fn store(&self, w: PageWord, order: Ordering) {
        AtomicPageWord::store(self, w, order)
    }
    #[inline]
    fn compare_exchange(&self, c: PageWord, n: PageWord, s: Ordering, f: Ordering) -> Result<PageWord, PageWord> {
        AtomicPageWord::compare_exchange(self, c, n, s, f)
    }
}

#[cfg(loom)]
impl WordCell for crate::sync::AtomicU64 {
    fn store(&self, w: PageWord, order: Ordering) {
        crate::sync::AtomicU64::store(self, w.0, order)
    }
    fn compare_exchange(&self, c: PageWord, n: PageWord, s: Ordering, f: Ordering) -> Result<PageWord, PageWord> {
        crate::sync::AtomicU64::compare_exchange(self, c.0, n.0, s, f).map(PageWord).map_err(PageWord)
    }
}

/// Most pages one [`Claim`] covers (a 2 MiB folio of 4 KiB pages).
pub const MAX_CLAIM: usize = 512;

/// A set of pages of a run of at most [`MAX_CLAIM`], one bit each (64 bytes, so it may live
/// on any stack).
#[derive(Copy, Clone, Default, PartialEq, Eq, Debug)]
pub struct PageSet([u64; MAX_CLAIM / 64]);

impl PageSet {
    /// Whether page `i` is in the set.
    #[inline]
    pub fn contains(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
    /// Add page `i`.
    #[inline]
    pub fn insert(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    /// Remove page `i`.
    #[inline]
    pub fn remove(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// A thread's claim on a run of page words (see the module documentation): which pages it
/// holds (CASed to `BUSY` by [`Claim::take`]) and the word each had.
///
/// Dropped, it rolls every page it still holds and has not published back to its old word;
/// so a path that gives up (a lost race, a refused copy) just returns, or calls
/// [`Claim::roll_back_all`] where the rollback must come before something else (a wake-up).
/// Pages get their next state one by one ([`Claim::set`]) or all at once
/// ([`Claim::publish`]); [`Claim::held`] and [`Claim::old`] stay readable afterwards.
pub struct Claim<'a, C: WordCell = AtomicPageWord> {
    /// The run's words.
    words: &'a [C],
    /// `old[i]`: page i's word before the claim (meaningful where `held`). Lent by the caller:
    /// 4 KiB is too much for a signal stack.
    old: &'a mut [PageWord],
    /// Claimed and not rolled back.
    held: PageSet,
    /// Held and not given its next state yet: what a drop rolls back.
    pending: PageSet,
}

impl<'a, C: WordCell> Claim<'a, C> {
    /// An empty claim on the run `words` (at most [`MAX_CLAIM`] of them), remembering old
    /// words in `old` (at least as long; its contents do not matter).
    pub fn new(words: &'a [C], old: &'a mut [PageWord]) -> Claim<'a, C> {
        assert!(words.len() <= MAX_CLAIM && old.len() >= words.len(), "claim of {} pages", words.len());
        Claim { words, old, held: PageSet::default(), pending: PageSet::default() }
    }

    /// Pages in the run.
    #[cfg_attr(
        loom,
        expect(clippy::len_without_is_empty, reason = "a claim on no pages is never made; public only for the models")
    )]
    #[inline]
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Claim page `i` if its word is still `w` (CAS to `BUSY`). Returns success.
    #[inline]
    pub fn take(&mut self, i: usize, w: PageWord) -> bool {
        debug_assert!(!self.held.contains(i) && !w.is_busy());
        let ok = self.words[i].compare_exchange(w, PageWord::BUSY, Ordering::AcqRel, Ordering::Relaxed).is_ok();
        if ok {
            self.old[i] = w;
            self.held.insert(i);
            self.pending.insert(i);
        }
        ok
    }

    /// Whether page `i` is held (claimed, not rolled back; published or not).
    #[inline]
    pub fn held(&self, i: usize) -> bool {
        self.held.contains(i)
    }

    /// The held pages.
    #[inline]
    pub fn held_set(&self) -> PageSet {
        self.held
    }

    /// True if every page of the run is held.
    pub fn all_held(&self) -> bool {
        (0..self.len()).all(|i| self.held.contains(i))
    }

    /// Page `i`'s word before the claim (meaningful if it was taken).
    #[inline]
    pub fn old(&self, i: usize) -> PageWord {
        self.old[i]
    }

    /// Roll the pages of `pages` that are held and unpublished back to their old words, in
    /// page order; they are not held any more.
    pub fn roll_back(&mut self, pages: &PageSet) {
        for i in 0..self.len() {
            if pages.contains(i) && self.pending.contains(i) {
                self.words[i].store(self.old[i], Ordering::Release);
                self.pending.remove(i);
                self.held.remove(i);
            }
        }
    }

    /// Roll every held, unpublished page back to its old word.
    pub fn roll_back_all(&mut self) {
        let all = self.pending;
        self.roll_back(&all);
    }

    /// Publish page `i`'s next state `w` (it must be held and not published yet); the page
    /// is the next owner's from this store on.
    #[inline]
    pub fn set(&mut self, i: usize, w: PageWord) {
        assert!(self.pending.contains(i), "page {i} of a claim set twice or never taken");
        self.words[i].store(w, Ordering::Release);
        self.pending.remove(i);
    }

    /// Publish every held, unpublished page's next state, `new(i, old word)`, in page order.
    pub fn publish(&mut self, mut new: impl FnMut(usize, PageWord) -> PageWord) {
        for i in 0..self.len() {
            if self.pending.contains(i) {
                let w = new(i, self.old[i]);
                self.set(i, w);
            }
        }
    }
}

impl<C: WordCell> Drop for Claim<'_, C> {
    fn drop(&mut self) {
        self.roll_back_all();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn word_fields_roundtrip() {
        let w = PageWord::swapped(9, (1 << 50) + 3);
        assert_eq!((w.kind(), w.order(), w.payload()), (kind::SWAPPED, 9, (1 << 50) + 3));
        let c = PageWord::clean(0, 12345, 4);
        assert!(c.is_mapped() && c.order() == 0 && c.clean_entry() == 12345);
        assert_eq!(c.clean_to_swapped(), PageWord::swapped(4, 12345));
        assert_eq!(PageWord::new(kind::BUSY, 0, 2), PageWord::BUSY_DROP);
        assert_eq!(format!("{c:?}"), "CLEAN(order 0, entry 0x3039, stored order 4)");
        assert_eq!(format!("{:?}", PageWord::BUSY_COPY), "BUSY_COPY");
        assert_eq!(format!("{:?}", PageWord::new(7, 1, 2)), "PageWord(0x20f)");
        assert_eq!(PageWord::from_bits(PageWord::BUSY_COPY.bits()), PageWord::BUSY_COPY);
    }

    #[test]
    fn claim_rolls_back_unpublished_pages_on_drop() {
        let words: Vec<AtomicPageWord> = (0..4).map(|i| AtomicPageWord::new(PageWord::swapped(0, i))).collect();
        let mut old = [PageWord::NONE; 4];
        {
            let mut c = Claim::new(&words, &mut old);
            assert!(c.take(0, PageWord::swapped(0, 0)));
            assert!(!c.take(1, PageWord::swapped(0, 9)), "a stale word is not claimed");
            assert!(c.take(2, PageWord::swapped(0, 2)));
            assert!(c.take(3, PageWord::swapped(0, 3)));
            assert_eq!(words[2].load(Ordering::Relaxed), PageWord::BUSY);
            c.set(2, PageWord::resident(0));
            let mut back = PageSet::default();
            back.insert(3);
            c.roll_back(&back);
            assert!(c.held(0) && !c.held(1) && c.held(2) && !c.held(3));
        }
        let got: Vec<PageWord> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        assert_eq!(
            got,
            [PageWord::swapped(0, 0), PageWord::swapped(0, 1), PageWord::resident(0), PageWord::swapped(0, 3)]
        );
    }
}
