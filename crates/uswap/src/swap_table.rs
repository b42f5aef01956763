//! Swap table: the per-slot 8-byte word and the per-cluster table of 512 of them.
//!
//! This module owns the *encoding* only; `cluster` owns the tables' lifetime and locking.
//! One word says everything about a slot (see `docs/design.md`):
//!
//! ```text
//!  63    60 59  58  56 55        44 43                          3 2   0
//! | COUNT  |REF| TIER |   GROUP    |          PAYLOAD (41)       |KIND |
//! ```
//!
//! FREE is the all-zero word, so a freshly zeroed table is a table of free slots and a reader
//! that finds no table at all sees the same thing. Words are read lock-free and changed only
//! under the cluster lock.

use crate::sync::AtomicU64;

/// Size of a page in bytes.
pub const PAGE_SIZE: usize = 4096;
/// log2 of the slots per cluster.
pub(crate) const CLUSTER_SHIFT: u32 = 9;
/// Slots per cluster (one PMD worth of 4 KiB pages, as in the kernel with THP_SWAP).
pub const SLOTS_PER_CLUSTER: usize = 1 << CLUSTER_SHIFT;
/// Largest folio order (2 MiB).
pub const MAX_ORDER: u8 = 9;
/// Number of folio orders (0..=MAX_ORDER).
pub const NR_ORDERS: usize = MAX_ORDER as usize + 1;

/// A swap entry: the index of a slot (the first slot of a folio) in a swap space.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SwapEntry(pub u64);

impl SwapEntry {
    /// Index of the cluster holding this slot.
    #[inline]
    pub fn cluster(self) -> usize {
        (self.0 >> CLUSTER_SHIFT) as usize
    }
    /// Offset of the slot inside its cluster.
    #[inline]
    pub fn offset(self) -> usize {
        (self.0 as usize) & (SLOTS_PER_CLUSTER - 1)
    }
    /// The entry `n` slots further on.
    #[inline]
    #[expect(clippy::should_implement_trait, reason = "slot arithmetic, not a general `+` on entries")]
    pub fn add(self, n: u64) -> SwapEntry {
        SwapEntry(self.0 + n)
    }
}

/// The kind of a slot, from the low three bits of its word.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Unused slot (the whole word is 0).
    Free = 0,
    /// In the swap cache: payload is a folio id.
    Cached = 1,
    /// An all-zero page: no data stored anywhere.
    Zero = 2,
    /// Stored in a tier: TIER says which, payload is the tier's handle.
    Stored = 3,
    /// Physical spaces only: the slot is owned by the virtual slot in the payload.
    Rmap = 4,
    /// Never allocatable.
    Bad = 7,
}

const KIND_MASK: u64 = 0b111;
const PAYLOAD_SHIFT: u32 = 3;
/// Width of the payload (handles, folio ids, owner slots).
pub(crate) const PAYLOAD_BITS: u32 = 41;
/// Largest payload value.
pub(crate) const PAYLOAD_MAX: u64 = (1 << PAYLOAD_BITS) - 1;
const GROUP_SHIFT: u32 = 44;
/// Width of the group id.
pub(crate) const GROUP_BITS: u32 = 12;
/// Largest group id.
pub(crate) const GROUP_MAX: u16 = (1 << GROUP_BITS) - 1;
const TIER_SHIFT: u32 = 56;
/// Largest tier index.
pub(crate) const TIER_MAX: u8 = 7;
const REF_BIT: u64 = 1 << 59;
const COUNT_SHIFT: u32 = 60;
/// Largest count kept inline; this value means "the real count is in the extend table".
pub const COUNT_MAX: u8 = 15;
const COUNT_MASK: u64 = 0xf << COUNT_SHIFT;

/// A table word, decoded on demand. `Word(0)` is a free slot.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Default)]
pub struct Word(pub u64);

impl std::fmt::Debug for Word {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Word")
            .field("kind", &self.kind())
            .field("count", &self.count())
            .field("ref", &self.referenced())
            .field("tier", &self.tier())
            .field("group", &self.group())
            .field("payload", &self.payload())
            .finish()
    }
}

impl Word {
    /// The free word.
    pub const FREE: Word = Word(0);
    /// The bad-slot word.
    #[cfg(test)]
    pub(crate) const BAD: Word = Word(Kind::Bad as u64);

    fn make(kind: Kind, group: u16, tier: u8, payload: u64, count: u8) -> Word {
        debug_assert!(payload <= PAYLOAD_MAX);
        debug_assert!(group <= GROUP_MAX);
        debug_assert!(tier <= TIER_MAX);
        debug_assert!(count <= COUNT_MAX);
        Word(
            (kind as u64)
                | (payload & PAYLOAD_MAX) << PAYLOAD_SHIFT
                | u64::from(group & GROUP_MAX) << GROUP_SHIFT
                | u64::from(tier & TIER_MAX) << TIER_SHIFT
                | u64::from(count & COUNT_MAX) << COUNT_SHIFT,
        )
    }
    /// A slot whose data is in the swap cache as folio `folio`.
    pub fn cached(group: u16, folio: u64, count: u8) -> Word {
        Word::make(Kind::Cached, group, 0, folio, count)
    }
    /// A zero page.
    pub fn zero(group: u16, count: u8) -> Word {
        Word::make(Kind::Zero, group, 0, 0, count)
    }
    /// Data stored in tier `tier` under `handle`.
    pub fn stored(group: u16, tier: u8, handle: u64, count: u8) -> Word {
        Word::make(Kind::Stored, group, tier, handle, count)
    }
    /// A physical slot owned by virtual slot `owner`.
    pub fn rmap(group: u16, owner: u64) -> Word {
        Word::make(Kind::Rmap, group, 0, owner, 1)
    }

    /// The kind of slot.
    #[inline]
    pub fn kind(self) -> Kind {
        match self.0 & KIND_MASK {
            0 => Kind::Free,
            1 => Kind::Cached,
            2 => Kind::Zero,
            3 => Kind::Stored,
            4 => Kind::Rmap,
            _ => Kind::Bad,
        }
    }
    /// True for the all-zero word.
    #[inline]
    pub fn is_free(self) -> bool {
        self.0 == 0
    }
    /// The inline count (15 = saturated, see the extend table).
    #[inline]
    pub fn count(self) -> u8 {
        ((self.0 & COUNT_MASK) >> COUNT_SHIFT) as u8
    }
    /// The same word with another inline count.
    #[inline]
    pub(crate) fn with_count(self, count: u8) -> Word {
        debug_assert!(count <= COUNT_MAX);
        Word((self.0 & !COUNT_MASK) | u64::from(count) << COUNT_SHIFT)
    }
    /// The referenced (second-chance) bit.
    #[inline]
    pub(crate) fn referenced(self) -> bool {
        self.0 & REF_BIT != 0
    }
    /// The same word with the referenced bit set or cleared.
    #[inline]
    pub(crate) fn with_referenced(self, r: bool) -> Word {
        if r {
            Word(self.0 | REF_BIT)
        } else {
            Word(self.0 & !REF_BIT)
        }
    }
    /// The tier index (meaningful for STORED).
    #[inline]
    pub(crate) fn tier(self) -> u8 {
        ((self.0 >> TIER_SHIFT) & u64::from(TIER_MAX)) as u8
    }
    /// The group id.
    #[inline]
    pub fn group(self) -> u16 {
        ((self.0 >> GROUP_SHIFT) & u64::from(GROUP_MAX)) as u16
    }
    /// The payload: folio id, handle or owner slot.
    #[inline]
    pub fn payload(self) -> u64 {
        (self.0 >> PAYLOAD_SHIFT) & PAYLOAD_MAX
    }
    /// The same word with the data location (kind, tier, payload) of `loc`, keeping this
    /// word's count, referenced bit and group.
    #[inline]
    pub(crate) fn with_location_of(self, loc: Word) -> Word {
        let keep = COUNT_MASK | REF_BIT | (u64::from(GROUP_MAX) << GROUP_SHIFT);
        Word((self.0 & keep) | (loc.0 & !keep))
    }
}

/// One cluster's table: 512 words, exactly one 4 KiB page.
#[repr(C, align(4096))]
pub(crate) struct SwapTable {
    /// The words, indexed by slot offset in the cluster.
    pub words: [AtomicU64; SLOTS_PER_CLUSTER],
}

impl SwapTable {
    /// A table of free slots (the loom build's tables: loom's atomics are not plain words).
    #[cfg(loom)]
    pub(crate) fn new_boxed() -> Box<SwapTable> {
        Box::new(SwapTable { words: std::array::from_fn(|_| AtomicU64::new(0)) })
    }

    /// A table of free slots in memory of the page heap ([`crate::page_heap::heap`]), not
    /// the process's allocator: tables come and go on the fault path (a store takes a cluster
    /// that had none, a put empties one). Free it with [`SwapTable::free_raw`]. (Under loom,
    /// a box: loom's atomics are not plain words.)
    pub(crate) fn alloc_raw() -> *mut SwapTable {
        #[cfg(not(loom))]
        {
            const { assert!(std::mem::size_of::<SwapTable>() == 4096) };
            match crate::page_heap::heap().alloc(std::mem::size_of::<SwapTable>()) {
                // A zero-filled page: 512 FREE words (an AtomicU64 is a plain u64 in memory).
                Some(p) => p.as_ptr().cast(),
                None => std::alloc::handle_alloc_error(std::alloc::Layout::new::<SwapTable>()),
            }
        }
        #[cfg(loom)]
        Box::into_raw(Self::new_boxed())
    }

    /// Free a table made by [`SwapTable::alloc_raw`].
    ///
    /// # Safety
    /// - `p` came from [`SwapTable::alloc_raw`], is freed once, and nothing uses it afterwards.
    pub(crate) unsafe fn free_raw(p: *mut SwapTable) {
        #[cfg(not(loom))]
        // SAFETY: a page-heap block of this size (caller's contract), unused from now.
        unsafe {
            crate::page_heap::heap().free(std::ptr::NonNull::new_unchecked(p.cast()), std::mem::size_of::<SwapTable>())
        };
        #[cfg(loom)]
        // SAFETY: from Box::into_raw in alloc_raw (caller's contract).
        drop(unsafe { Box::from_raw(p) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_fields_round_trip() {
        let w = Word::stored(4095, 7, PAYLOAD_MAX, 15).with_referenced(true);
        assert_eq!(w.kind(), Kind::Stored);
        assert_eq!(w.group(), 4095);
        assert_eq!(w.tier(), 7);
        assert_eq!(w.payload(), PAYLOAD_MAX);
        assert_eq!(w.count(), 15);
        assert!(w.referenced());
        let w2 = w.with_count(3).with_referenced(false);
        assert_eq!((w2.count(), w2.referenced(), w2.payload()), (3, false, PAYLOAD_MAX));
        let c = Word::cached(9, 12345, 0);
        let moved = w2.with_location_of(c);
        assert_eq!((moved.kind(), moved.payload(), moved.group(), moved.count()), (Kind::Cached, 12345, 4095, 3));
        assert!(Word::FREE.is_free());
        assert_eq!(Word::BAD.kind(), Kind::Bad);
        assert_eq!(Word::zero(1, 1).kind(), Kind::Zero);
        assert_eq!(Word::rmap(2, 77).payload(), 77);
    }

    #[test]
    fn table_is_one_page() {
        assert_eq!(std::mem::size_of::<SwapTable>(), PAGE_SIZE);
    }
}
