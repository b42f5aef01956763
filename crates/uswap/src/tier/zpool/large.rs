//! The large-object area: objects larger than the biggest size class (whole large folios),
//! each an exact, page-rounded allocation of the page heap, and the freed allocations kept for
//! reuse within the pool's spare budget.
//!
//! Locking: none taken here. The area lives in the pool's large-area mutex (`PoolLarge`);
//! dropping it gives its memory back to the page heap (which takes its own locks).

use crate::page_heap::{self, PageVec};
use std::ptr::NonNull;

/// An object too large for a size class: an exact page-rounded allocation.
#[derive(Clone, Copy)]
pub(super) struct Large {
    pub(super) mem: NonNull<u8>,
    pub(super) alloc: usize,
    pub(super) len: usize,
    pub(super) hdr: u64,
    /// Stored or loaded since the last [`ZPool::mark_idle`](super::ZPool::mark_idle) (see `Zspage::touched`).
    pub(super) touched: bool,
    /// Tried by a recompression pass (see `Zspage::swept`).
    pub(super) swept: bool,
    /// A recompression pass holds its handle: once freed, its slot index is not reused until
    /// that pass lets go of it (no ABA through a reused index).
    pub(super) held: bool,
}

pub(super) struct LargeArea {
    pub(super) slots: PageVec<Option<Large>>,
    pub(super) free: PageVec<u32>,
    /// Freed allocations (pointer, size) kept for reuse by an object of the same page-rounded
    /// size: large folios store objects of a few sizes over and over, and the store/free pair
    /// may run in a SIGBUS handler. At most [`SPARE_LARGE`], within the pool's
    /// [`SpareBudget`](super::class::SpareBudget).
    pub(super) spare: Vec<(NonNull<u8>, usize)>,
}

/// Freed large-object allocations kept for reuse.
pub(super) const SPARE_LARGE: usize = 32;

impl Default for LargeArea {
    fn default() -> Self {
        // `spare` never grows past its capacity (the fault path must not allocate).
        LargeArea { slots: PageVec::new(), free: PageVec::new(), spare: Vec::with_capacity(SPARE_LARGE) }
    }
}

// SAFETY: the area owns its allocations exclusively and is only touched under its mutex.
unsafe impl Send for LargeArea {}

impl Drop for LargeArea {
    fn drop(&mut self) {
        for (m, alloc) in self.spare.drain(..) {
            // SAFETY: allocated with this size in place(); kept here only.
            unsafe { page_heap::heap().free(m, alloc) };
        }
        for l in self.slots.iter().flatten() {
            // SAFETY: allocated with this size in place(); freed once.
            unsafe { page_heap::heap().free(l.mem, l.alloc) };
        }
    }
}
