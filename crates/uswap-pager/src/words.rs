//! Where a region's page words live: a mapping of their own for a large region, a block of a
//! shared slab for a small one (the kernel's page tables, as far as their memory goes).
//!
//! A region keeps 12 bytes per page (its state word and its shadow, [`crate::region`]). A
//! mapping of its own costs at least a page, which is 12 KiB of words per 16 KiB region
//! rounded up to 4 KiB: a runtime that maps its heap in small pieces (Ruby maps 16 KiB ones,
//! each adopted as a region of its own) would pay most of a page of words per piece, all
//! counted against its limit as memory outside the pager. Words of up to [`SLAB_MAX`] bytes
//! (regions of up to 170 pages) take a power-of-two block, 64 bytes at least, carved
//! from 64 KiB slab chunks. Chunks are the pager's own mappings ([`crate::own::Mapping`]: never
//! adopted) and are kept for reuse, never unmapped; a freed block goes on its class's free
//! list and is zeroed when it is taken again.
//!
//! Locking: one [`crate::sys::YieldLock`] over the slab's free lists and bump pointers, held
//! for a few loads and stores and never across a system call (a new chunk is mapped outside
//! it) or managed memory. A fork child takes it over ([`reset_in_fork_child`]): the
//! parent's threads that could hold it (adoption, retirement) do not run during a fork.

use crate::own::Mapping;
use crate::sys::YieldLock;
use std::cell::UnsafeCell;
use std::ptr::NonNull;

/// Largest word block taken from the slab; larger ones get a mapping of their own.
pub(crate) const SLAB_MAX: usize = 2048;
/// Smallest block (and the first class).
const SLAB_MIN: usize = 64;
/// Classes 64, 128, ..., `SLAB_MAX` bytes.
const CLASSES: usize = (SLAB_MAX / SLAB_MIN).trailing_zeros() as usize + 1;
/// Bytes of one slab chunk.
const CHUNK: usize = 64 << 10;

/// A region's page words: `len` zeroed bytes, 8-aligned, for the region's life.
pub(crate) enum Words {
    /// A mapping of their own (more than [`SLAB_MAX`] bytes).
    Mapped(Mapping),
    /// A block of class `class` of the slab.
    Slab {
        /// The block's first byte.
        ptr: NonNull<u8>,
        /// Its class (block size `SLAB_MIN << class`).
        class: usize,
    },
}

// SAFETY: `Words` owns its memory (a mapping, or a slab block nobody else hands out until it
// is freed in `drop`); the region reads it through atomics only.
unsafe impl Send for Words {}
// SAFETY: as above.
unsafe impl Sync for Words {}

impl Words {
    /// `len` zeroed bytes of words.
    pub(crate) fn new(len: usize) -> std::io::Result<Words> {
        if len > SLAB_MAX {
            return Mapping::new(len).map(Words::Mapped);
        }
        let class = class_of(len);
        Ok(Words::Slab { ptr: SLAB.take(class)?, class })
    }

    /// The first byte (8-aligned).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        match self {
            Words::Mapped(m) => m.as_ptr(),
            Words::Slab { ptr, .. } => ptr.as_ptr(),
        }
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        if let Words::Slab { ptr, class } = *self {
            SLAB.give(ptr, class);
        }
    }
}

/// The class whose blocks hold `len` bytes (`len <= SLAB_MAX`).
fn class_of(len: usize) -> usize {
    (len.max(SLAB_MIN).next_power_of_two() / SLAB_MIN).trailing_zeros() as usize
}

/// Free lists and bump pointers, under [`Slab::lock`].
struct SlabState {
    /// Per class: the first free block (its first 8 bytes point to the next), or null.
    free: [*mut u8; CLASSES],
    /// The chunk being carved: next free byte and its end (0, 0: none).
    bump: usize,
    bump_end: usize,
}

struct Slab {
    lock: YieldLock,
    state: UnsafeCell<SlabState>,
}

// SAFETY: `state` is only accessed under `lock` (or by a fork child before it starts threads).
unsafe impl Sync for Slab {}

static SLAB: Slab = Slab {
    lock: YieldLock::new(),
    state: UnsafeCell::new(SlabState { free: [std::ptr::null_mut(); CLASSES], bump: 0, bump_end: 0 }),
};

impl Slab {
    /// A zeroed block of `class`.
    fn take(&self, class: usize) -> std::io::Result<NonNull<u8>> {
        let size = SLAB_MIN << class;
        loop {
            {
                let _g = self.lock.lock();
                // SAFETY: under the lock.
                let st = unsafe { &mut *self.state.get() };
                let head = st.free[class];
                let got = if !head.is_null() {
                    // SAFETY: a free block of this class; its first word is the next one.
                    st.free[class] = unsafe { head.cast::<*mut u8>().read() };
                    Some(head)
                } else if st.bump + size <= st.bump_end {
                    let p = st.bump as *mut u8;
                    st.bump += size;
                    Some(p)
                } else {
                    None
                };
                if let Some(p) = got {
                    // SAFETY: the block is ours now, `size` bytes inside a live chunk.
                    unsafe { std::ptr::write_bytes(p, 0, size) };
                    // SAFETY: chunk memory is never null.
                    return Ok(unsafe { NonNull::new_unchecked(p) });
                }
            }
            // A new chunk, mapped outside the lock; what is left of the old one is dropped
            // (at most SLAB_MAX bytes: blocks come in falling sizes only by chance, so this is
            // simple rather than tight).
            let chunk = Mapping::new(CHUNK)?;
            let base = chunk.as_ptr() as usize;
            // Kept for the process's life: blocks carved from it are handed out and returned
            // to the free lists, never to the kernel.
            std::mem::forget(chunk);
            let _g = self.lock.lock();
            // SAFETY: under the lock.
            let st = unsafe { &mut *self.state.get() };
            st.bump = base;
            st.bump_end = base + CHUNK;
        }
    }

    /// Give back a block of `class`.
    fn give(&self, p: NonNull<u8>, class: usize) {
        let _g = self.lock.lock();
        // SAFETY: under the lock.
        let st = unsafe { &mut *self.state.get() };
        // SAFETY: the block is ours (the caller's `Words` is being dropped) and at least 64
        // bytes: its first word links it in.
        unsafe { p.as_ptr().cast::<*mut u8>().write(st.free[class]) };
        st.free[class] = p.as_ptr();
    }
}

/// In a fork child, before its threads start: the lock is free (its holder, if any, does not
/// exist here).
pub(crate) fn reset_in_fork_child() {
    SLAB.lock.force_unlock();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_small_size() {
        assert_eq!(class_of(1), 0);
        assert_eq!(class_of(64), 0);
        assert_eq!(class_of(65), 1);
        assert_eq!(class_of(SLAB_MAX), CLASSES - 1);
        for len in 1..=SLAB_MAX {
            assert!(SLAB_MIN << class_of(len) >= len, "{len}");
        }
    }

    #[test]
    fn blocks_are_zeroed_and_distinct() {
        let mut v: Vec<Words> = (0..200).map(|i| Words::new(12 * (1 + i % 170)).unwrap()).collect();
        for (i, w) in v.iter().enumerate() {
            let n = 12 * (1 + i % 170);
            // SAFETY: `n` bytes of the block are ours.
            let b = unsafe { std::slice::from_raw_parts_mut(w.as_ptr(), n) };
            assert!(b.iter().all(|&x| x == 0), "block {i} not zeroed");
            assert_eq!(w.as_ptr() as usize % 8, 0);
            b.fill(i as u8 + 1);
        }
        // No two blocks overlap: each still holds its own fill.
        for (i, w) in v.iter().enumerate() {
            let n = 12 * (1 + i % 170);
            // SAFETY: as above.
            let b = unsafe { std::slice::from_raw_parts(w.as_ptr(), n) };
            assert!(b.iter().all(|&x| x == i as u8 + 1), "block {i} overwritten");
        }
        // Freed blocks come back zeroed (other tests may take some of them meanwhile).
        v.clear();
        let again: Vec<Words> = (0..200).map(|i| Words::new(12 * (1 + i % 170)).unwrap()).collect();
        for (i, w) in again.iter().enumerate() {
            // SAFETY: as above.
            let b = unsafe { std::slice::from_raw_parts(w.as_ptr(), 12 * (1 + i % 170)) };
            assert!(b.iter().all(|&x| x == 0), "reused block {i} not zeroed");
        }
        assert!(matches!(Words::new(SLAB_MAX + 1).unwrap(), Words::Mapped(_)));
    }
}
