//! Page words: the pager's page table at its lowest level, knowing nothing of regions,
//! lists or stores.
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

/// An atomic [`PageWord`]: an `AtomicU64` (always `std`'s: it lives in mmap'ed memory, which
/// loom's atomics cannot), read and written as page words.
#[repr(transparent)]
#[derive(Default)]
pub struct AtomicPageWord(AtomicU64);

impl AtomicPageWord {
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
    }
}
