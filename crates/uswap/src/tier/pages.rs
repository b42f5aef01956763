//! Page-granular memory for the compressed pool: zspages and large objects ([`PageHeap`]).
//!
//! The pool's size is charged to a limit (the pager's resident limit counts it, as a memory
//! cgroup counts zswap), so when the pool shrinks its memory must leave the process. A general
//! heap does not do that: glibc's malloc and the dlmalloc inside the LD_PRELOAD library keep
//! freed chunks resident for reuse, and a pool that grew to 40 MiB and shrank to nothing still
//! held 40 MiB of RSS. The pool's allocations are whole pages anyway, so they come from here:
//! page-aligned blocks carved from one `MAP_NORESERVE` reservation (address space only; memory
//! is committed on first touch). A freed block is released at once with
//! `madvise(MADV_DONTNEED)` and kept on the free list of its page count, so its address range
//! is reused by the next block of that size and reads as zeros until written. Blocks larger
//! than [`MAX_PAGES`] are mappings of their own.
//!
//! One heap serves the whole process ([`heap`]): pools come and go (tests create hundreds) and
//! share the reservation.
//!
//! Locking: one mutex per page count guards that free list (held for a push or a pop, never
//! across a system call); the bump pointer is an atomic.

use crate::sync::{LockClass, Mutex};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

const PAGE: usize = 4096;
/// Largest block, in pages, served from the reservation (4 MiB); larger ones are mapped alone.
pub const MAX_PAGES: usize = 1024;
/// Address space reserved for the heap (never committed as a whole).
const RESERVE: usize = 1 << 40;

/// Page-aligned, zero-filled blocks of whole pages that give their memory back when freed.
pub struct PageHeap {
    base: usize,
    cap: usize,
    bump: AtomicUsize,
    free: Box<[Mutex<Vec<usize>>]>,
    /// Bytes in blocks handed out and not yet freed.
    live: AtomicU64,
}

/// The process's page heap.
pub fn heap() -> &'static PageHeap {
    static H: OnceLock<PageHeap> = OnceLock::new();
    H.get_or_init(|| PageHeap::new(RESERVE))
}

fn map(len: usize, noreserve: bool) -> Option<usize> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if noreserve { libc::MAP_NORESERVE } else { 0 };
    // SAFETY: a fresh anonymous mapping with no address hint.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    (p != libc::MAP_FAILED).then_some(p as usize)
}

impl PageHeap {
    /// A heap over a reservation of `cap` bytes of address space. If the reservation cannot be
    /// made, every block is a mapping of its own (correct, just slower).
    pub fn new(cap: usize) -> PageHeap {
        let (base, cap) = match map(cap, true) {
            Some(b) => (b, cap),
            None => (0, 0),
        };
        PageHeap {
            base,
            cap,
            bump: AtomicUsize::new(0),
            free: (0..=MAX_PAGES).map(|_| Mutex::new(LockClass::PageHeap, Vec::new())).collect(),
            live: AtomicU64::new(0),
        }
    }

    fn pages(bytes: usize) -> usize {
        bytes.max(1).div_ceil(PAGE)
    }

    /// A zero-filled, page-aligned block of at least `bytes` bytes (rounded up to whole pages),
    /// or `None` when no memory or address space is left.
    pub fn alloc(&self, bytes: usize) -> Option<NonNull<u8>> {
        let n = Self::pages(bytes);
        let p = if n > MAX_PAGES {
            map(n * PAGE, false)?
        } else if let Some(p) = self.free[n].lock().pop() {
            p
        } else {
            let off = self.bump.fetch_add(n * PAGE, Ordering::Relaxed);
            if off + n * PAGE > self.cap {
                self.bump.fetch_sub(n * PAGE, Ordering::Relaxed);
                map(n * PAGE, false)?
            } else {
                self.base + off
            }
        };
        self.live.fetch_add((n * PAGE) as u64, Ordering::Relaxed);
        NonNull::new(p as *mut u8)
    }

    /// Release a block: its memory goes back to the kernel now.
    ///
    /// # Safety
    /// - `p` came from [`PageHeap::alloc`] of this heap with the same `bytes`, and is not used
    ///   again.
    pub unsafe fn free(&self, p: NonNull<u8>, bytes: usize) {
        let n = Self::pages(bytes);
        let a = p.as_ptr() as usize;
        self.live.fetch_sub((n * PAGE) as u64, Ordering::Relaxed);
        if n > MAX_PAGES || a < self.base || a >= self.base + self.cap {
            // SAFETY: a mapping of its own made by `alloc` (caller's contract), unused from now.
            unsafe { libc::munmap(a as *mut libc::c_void, n * PAGE) };
            return;
        }
        // SAFETY: the block is ours and unused from now (caller's contract); DONTNEED on private
        // anonymous memory drops the pages, and the range reads as zeros afterwards.
        unsafe { libc::madvise(a as *mut libc::c_void, n * PAGE, libc::MADV_DONTNEED) };
        self.free[n].lock().push(a);
    }

    /// Bytes in blocks handed out and not freed (what the heap holds in memory, at most).
    pub fn live_bytes(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident bytes of a block, from mincore(2).
    fn resident(p: NonNull<u8>, len: usize) -> usize {
        let mut v = vec![0u8; len.div_ceil(PAGE)];
        // SAFETY: a page-aligned block of ours and a vector of one byte per page.
        assert_eq!(unsafe { libc::mincore(p.as_ptr().cast(), len, v.as_mut_ptr()) }, 0);
        v.iter().filter(|&&b| b & 1 != 0).count() * PAGE
    }

    #[test]
    fn freed_blocks_leave_rss_and_come_back_zeroed() {
        let h = PageHeap::new(1 << 30);
        let blocks: Vec<_> = (0..64).map(|_| h.alloc(65536).unwrap()).collect();
        for b in &blocks {
            assert_eq!(b.as_ptr() as usize % PAGE, 0);
            // SAFETY: our 64 KiB block.
            unsafe { std::ptr::write_bytes(b.as_ptr(), 0xab, 65536) };
        }
        assert_eq!(h.live_bytes(), 64 * 65536);
        assert!(blocks.iter().all(|&b| resident(b, 65536) == 65536));
        for b in &blocks {
            // SAFETY: allocated above with this size, not used again.
            unsafe { h.free(*b, 65536) };
        }
        assert_eq!(h.live_bytes(), 0);
        assert!(blocks.iter().all(|&b| resident(b, 65536) == 0), "freed blocks left resident");
        // Reuse: same addresses, zero-filled.
        let b = h.alloc(65536).unwrap();
        assert!(blocks.contains(&b));
        // SAFETY: reading our block.
        let s = unsafe { std::slice::from_raw_parts(b.as_ptr(), 65536) };
        assert!(s.iter().all(|&x| x == 0));
        // SAFETY: as above.
        unsafe { h.free(b, 65536) };
    }

    #[test]
    fn oversized_blocks_and_an_exhausted_reservation_use_their_own_mappings() {
        let h = PageHeap::new(8 * PAGE);
        let big = h.alloc((MAX_PAGES + 1) * PAGE).unwrap();
        let a = h.alloc(8 * PAGE).unwrap(); // fills the reservation
        let b = h.alloc(PAGE).unwrap(); // beyond it
        for (p, n) in [(big, (MAX_PAGES + 1) * PAGE), (a, 8 * PAGE), (b, PAGE)] {
            // SAFETY: our blocks.
            unsafe { std::ptr::write_bytes(p.as_ptr(), 1, n) };
        }
        assert_eq!(h.live_bytes() as usize, (MAX_PAGES + 1 + 8 + 1) * PAGE);
        // SAFETY: each freed once with its size.
        unsafe {
            h.free(big, (MAX_PAGES + 1) * PAGE);
            h.free(a, 8 * PAGE);
            h.free(b, PAGE);
        }
        assert_eq!(h.live_bytes(), 0);
    }
}
