//! An eviction batch and the pool it comes from: the blocks a batch takes ([`Block`], each
//! with its destination, [`Dest`]), their new words and the phases' scratch arrays
//! ([`Batch`]), and the fixed [`BatchPool`] they live in.
//!
//! A batch is tens of KiB and lives in the pool, not on the stack: reclaim runs on the
//! faulting thread, in SIGBUS mode inside the handler on the program's own stack, which may
//! be small (and a fault taken inside reclaim nests a second one). A pool rather than a
//! per-thread buffer: thread-locals that large would cost every program thread their memory
//! and may be allocated lazily (on the fault path); a pool is reserved once (`MAP_NORESERVE`)
//! and taken with one CAS.
//!
//! Locking: a batch is taken by CAS on a bit mask ([`Slots`]) and returned on drop. When all
//! are in use an outermost reclaim waits for one (it holds no page or lock then), and a
//! reclaim nested in a fault inside this thread's own reclaim ([`IN_RECLAIM`] > 1) gets none
//! and evicts nothing (its outer level may hold the batch it would wait for).

use crate::page::PageWord;
use crate::region::RegionInner;
use crate::slots::Slots;
use std::cell::Cell;

/// Most pages one reclaim batch handles.
pub(crate) const MAX_BATCH_PAGES: usize = 1024;

/// Most blocks one reclaim batch holds.
pub(super) const MAX_BLOCKS: usize = 256;

thread_local! {
    /// Depth of reclaim on this thread (a fault taken inside our own reclaim must not wait
    /// for pages this thread holds).
    pub(crate) static IN_RECLAIM: Cell<u32> = const { Cell::new(0) };
}

/// Where a block of an eviction batch goes. `evict::select` sets the first destination; later
/// phases only change it as their comments say. `Store` is 0, so an all-zero [`Batch`] is
/// valid (see [`BatchPool::take`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Dest {
    /// Copied out and compressed into the store. Also the first destination of a clean
    /// folio on its way to the swap cache (`Block::clean`), until `evict::copy_out` decides.
    Store = 0,
    /// Copied into the swap cache (demoted to the inactive list); set by `evict::copy_out`.
    Cache,
    /// Eviction undone (write protection failed, the copy or the store failed, or the
    /// batch was given up): the block stays resident.
    Aborted,
    /// Clean, its swap entries kept: nothing to write, only the drop.
    CleanKept,
    /// Clean, but the program dropped it itself: its entries are freed and it becomes
    /// zero-fill.
    CleanDropped,
}

impl Dest {
    /// A clean block left as clean (kept or dropped): write-protected since its swap-in, and
    /// nothing to copy.
    pub(super) fn is_clean(self) -> bool {
        matches!(self, Dest::CleanKept | Dest::CleanDropped)
    }
}

/// A block of a batch: a naturally aligned power-of-two piece of a folio, its pages claimed.
#[derive(Copy, Clone)]
pub(super) struct Block {
    /// The block's region (from the registry, inside `region::enter`/`leave`).
    pub(super) r: *const RegionInner,
    /// First page.
    pub(super) page: usize,
    pub(super) order: u32,
    /// Index of the block's first new word in the words array.
    pub(super) w: usize,
    /// Where the block goes.
    pub(super) dest: Dest,
    /// A clean folio on its way to the swap cache (its words hold the kept SWAPPED words).
    pub(super) clean: bool,
    /// Given up in `evict::drop_pages` because a write wanted a page back (`BUSY_WANTED`): its
    /// write protection is lifted once the read gate is released.
    pub(super) wanted: bool,
}

/// An eviction batch: the blocks taken (naturally aligned pieces of folios), their new words
/// (`words[blk.w..blk.w + 2^order]`), and the phases' scratch arrays. Tens of KiB: never on
/// a stack (it may be a program thread's, interrupted by SIGBUS), but in a [`BatchPool`].
pub(super) struct Batch {
    pub(super) blocks: [Block; MAX_BLOCKS],
    pub(super) nblocks: usize,
    pub(super) words: [PageWord; MAX_BATCH_PAGES + 512],
    pub(super) nwords: usize,
    /// `evict::select`: the words of one candidate's pages before the claim.
    pub(super) claimed: [PageWord; 512],
    /// `evict::drop_pages`: the ranges to drop.
    pub(super) iov: [libc::iovec; MAX_BLOCKS],
    /// `evict::abort_all`: a cached block's kept entries.
    pub(super) kept: [PageWord; 512],
    /// `evict::clean_present`: its `mincore` vector.
    pub(super) mincore: [u8; 512],
}

/// Eviction batches in flight at once, at most (one per reclaiming thread and nesting level;
/// see [`BatchPool::take`]).
const NBATCH: usize = 8;

/// A fixed pool of [`Batch`]es in the pager's own memory (`MAP_NORESERVE`, committed on first
/// use), taken and returned by CAS on a bit mask ([`Slots`]): eviction runs on the faulting
/// thread, maybe inside its SIGBUS handler on the program's stack, so the batch must not be on
/// that stack and must not be allocated.
pub(crate) struct BatchPool {
    mem: crate::own::Mapping,
    /// Which batches are free.
    free: Slots,
}

impl BatchPool {
    /// Reserve the pool.
    pub(crate) fn new() -> std::io::Result<BatchPool> {
        let mem = crate::own::Mapping::new(NBATCH * std::mem::size_of::<Batch>())?;
        Ok(BatchPool { mem, free: Slots::new(NBATCH) })
    }

    /// Take a batch, all zero (empty). When every batch is in use, an outermost reclaim waits
    /// (spinning, then yielding) for one, holding nothing another thread waits for; a nested
    /// one (a fault taken inside this thread's own reclaim, whose outer level may hold a
    /// batch) gets `None` and evicts nothing, as waiting could then wait for itself.
    pub(super) fn take(&self) -> Option<BatchGuard<'_>> {
        let mut backoff = crate::sys::Backoff::default();
        loop {
            let Some(i) = self.free.try_take() else {
                if IN_RECLAIM.with(|c| c.get()) > 1 {
                    return None;
                }
                backoff.snooze();
                continue;
            };
            // SAFETY: batch i is inside the mapping and ours until the guard returns it.
            // All-zero is a valid empty Batch (plain data; `Dest`'s first variant is 0).
            unsafe { std::ptr::write_bytes(self.batch(i), 0, 1) };
            return Some(BatchGuard { pool: self, i });
        }
    }

    /// Batch `i` (< NBATCH) of the mapping (page-aligned, so aligned for `Batch`).
    fn batch(&self, i: usize) -> *mut Batch {
        debug_assert!(i < NBATCH);
        self.mem.as_ptr().cast::<Batch>().wrapping_add(i)
    }

    /// In a fork child: every batch is free (the threads that held one do not exist there).
    pub(crate) fn reset_in_fork_child(&self) {
        self.free.reset();
    }
}

/// A batch taken from a [`BatchPool`]; returned on drop.
pub(super) struct BatchGuard<'p> {
    pool: &'p BatchPool,
    i: usize,
}

impl BatchGuard<'_> {
    /// Empty the batch again (all zero), for another pass.
    pub(super) fn clear(&mut self) {
        // SAFETY: as in `get`; all-zero is a valid empty Batch (see `BatchPool::take`).
        unsafe { std::ptr::write_bytes(self.pool.batch(self.i), 0, 1) };
    }

    /// The batch.
    pub(super) fn get(&mut self) -> &mut Batch {
        // SAFETY: batch i is ours (taken by CAS, returned only by our drop); inside the
        // mapping; `&mut self` makes the borrow exclusive.
        unsafe { &mut *self.pool.batch(self.i) }
    }
}

impl Drop for BatchGuard<'_> {
    fn drop(&mut self) {
        self.pool.free.put(self.i);
    }
}
