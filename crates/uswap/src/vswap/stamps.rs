//! Per-slot age stamps: when each virtual slot was last stored or swapped in, for writeback by
//! age ([`Engine::writeback_older_than`](super::Engine::writeback_older_than)).
//!
//! Locking: none. The stamps are relaxed atomics outside any lock: a heuristic for writeback
//! by age, not synchronization, so a stale value only makes an object look older or younger.
//! A stamp is written on the fault path (one clock read and relaxed stores: no allocation, no
//! lock, no system call).

use crate::swap_table::{SwapEntry, PAGE_SIZE};
use std::sync::atomic::AtomicU32 as StdAtomicU32;
use std::time::{Duration, Instant};

/// Per-slot age stamps in an anonymous mapping of their own: zero pages until written, so
/// only the pages of slots ever used become resident, whatever the process's allocator does
/// with `calloc` (the LD_PRELOAD library's heap would commit it all).
///
/// A stamp is the time the slot was last stored or swapped in, in ms since `epoch` (+1; 0 =
/// never).
pub(super) struct Stamps {
    ptr: std::ptr::NonNull<StdAtomicU32>,
    len: usize,
    epoch: Instant,
}

// SAFETY: the mapping is owned by the struct and only accessed through atomics.
unsafe impl Send for Stamps {}
// SAFETY: as above.
unsafe impl Sync for Stamps {}

impl Stamps {
    /// Stamps for `n` slots, all "never", with the epoch now.
    pub(super) fn new(n: usize) -> Stamps {
        let bytes = (n.max(1) * 4).next_multiple_of(PAGE_SIZE);
        let epoch = Instant::now();
        match crate::page_heap::map(bytes, true).and_then(|p| std::ptr::NonNull::new(p as *mut StdAtomicU32)) {
            Some(ptr) => Stamps { ptr, len: n, epoch },
            // No address space: no stamps (every object then looks as old as the engine).
            None => Stamps { ptr: std::ptr::NonNull::dangling(), len: 0, epoch },
        }
    }

    /// Now, as a stamp (never 0).
    fn now_stamp(&self) -> u32 {
        (self.epoch.elapsed().as_millis() as u32).wrapping_add(1).max(1)
    }

    /// Record an access to `[entry, entry + n)` (allocation-free, lock-free: one clock read and
    /// relaxed stores; it runs on the fault path).
    pub(super) fn touch(&self, entry: SwapEntry, n: usize) {
        let now = self.now_stamp();
        let lo = entry.0 as usize;
        if let Some(s) = self.get(lo..lo.saturating_add(n)) {
            for a in s {
                a.store(now, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Time since any slot of the object `[first, first + n)` was last stored or swapped in.
    pub(super) fn idle_for(&self, first: usize, n: usize) -> Duration {
        let now = self.now_stamp();
        let newest = self
            .get(first..first + n)
            .map(|s| s.iter().map(|a| now.wrapping_sub(a.load(std::sync::atomic::Ordering::Relaxed))).min())
            .unwrap_or_default()
            .unwrap_or(0);
        Duration::from_millis(u64::from(newest))
    }

    /// The stamps of the slots `r`, or None outside the mapping.
    fn get(&self, r: std::ops::Range<usize>) -> Option<&[StdAtomicU32]> {
        if r.start > r.end || r.end > self.len {
            return None;
        }
        // SAFETY: `ptr` maps `len` zero-initialised `u32`s (a valid `AtomicU32` bit pattern,
        // same size and alignment) for as long as `self` lives; `r` is inside it.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(r.start), r.end - r.start) })
    }
}

impl Drop for Stamps {
    fn drop(&mut self) {
        if self.len > 0 {
            let bytes = (self.len * 4).next_multiple_of(PAGE_SIZE);
            // SAFETY: unmapping the mapping made in `new`, which nothing references any more.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), bytes) };
        }
    }
}
