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
//! across a system call but the `mmap` of a free list that grows); the bump pointer is an
//! atomic. Nothing here uses the process's allocator once the heap exists: the free lists are
//! [`PageVec`]s, so the pool can grow and shrink on the fault path.

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
    free: Box<[Mutex<PageVec<usize>>]>,
    /// Bytes in blocks handed out and not yet freed.
    live: AtomicU64,
}

/// The process's page heap.
pub fn heap() -> &'static PageHeap {
    static H: OnceLock<PageHeap> = OnceLock::new();
    H.get_or_init(|| PageHeap::new(RESERVE))
}

/// A fresh private anonymous read-write mapping of `len` bytes (zero pages until written;
/// `noreserve`: address space only, no commit charge), or None.
pub(crate) fn map(len: usize, noreserve: bool) -> Option<usize> {
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
            free: (0..=MAX_PAGES).map(|_| Mutex::new(LockClass::PageHeap, PageVec::new())).collect(),
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

/// A growable array of plain values in memory of its own mapping, not the heap: the pool's
/// metadata (zspage tables, fullness lists, free ids) and the page heap's free lists, which
/// grow on the fault path (a store in direct reclaim), where the process's allocator is
/// off limits (see `docs/design.md`, "Deadlock freedom"). Growing maps a block twice the size
/// (whole pages), copies, and unmaps the old one: system calls, no lock.
pub struct PageVec<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
}

// SAFETY: a PageVec owns its mapping exclusively, like a Vec its buffer.
unsafe impl<T: Copy + Send> Send for PageVec<T> {}
// SAFETY: shared access only hands out `&[T]`.
unsafe impl<T: Copy + Sync> Sync for PageVec<T> {}

impl<T: Copy> Default for PageVec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> PageVec<T> {
    /// An empty array (no mapping yet).
    pub const fn new() -> Self {
        const { assert!(std::mem::size_of::<T>() > 0 && std::mem::align_of::<T>() <= PAGE) };
        PageVec { ptr: NonNull::dangling(), len: 0, cap: 0 }
    }

    /// An empty array with room for `n` values.
    pub fn with_capacity(n: usize) -> Self {
        let mut v = Self::new();
        if n > 0 {
            v.grow_to(n);
        }
        v
    }

    fn grow_to(&mut self, want: usize) {
        let bytes = (want * std::mem::size_of::<T>()).next_multiple_of(PAGE);
        let p = map(bytes, false).unwrap_or_else(|| {
            // Out of memory or address space: as a Vec would.
            std::alloc::handle_alloc_error(std::alloc::Layout::from_size_align(bytes, PAGE).expect("layout"))
        }) as *mut T;
        if self.cap > 0 {
            // SAFETY: the old block holds `len` initialised values, the new one has room for
            // at least `want > len` of them; distinct mappings do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), p, self.len) };
            self.unmap();
        }
        self.ptr = NonNull::new(p).expect("mmap returned null");
        self.cap = bytes / std::mem::size_of::<T>();
    }

    fn unmap(&mut self) {
        if self.cap > 0 {
            let bytes = (self.cap * std::mem::size_of::<T>()).next_multiple_of(PAGE);
            // SAFETY: our own mapping of `bytes` bytes, made in grow_to; not used afterwards.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), bytes) };
            self.cap = 0;
        }
    }

    /// Append `v`.
    pub fn push(&mut self, v: T) {
        if self.len == self.cap {
            self.grow_to((self.cap * 2).max(PAGE / std::mem::size_of::<T>()).max(1));
        }
        // SAFETY: len < cap: inside the mapping.
        unsafe { self.ptr.as_ptr().add(self.len).write(v) };
        self.len += 1;
    }

    /// Remove and return the last value.
    pub fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: index len (old len - 1) is initialised.
        Some(unsafe { self.ptr.as_ptr().add(self.len).read() })
    }

    /// Remove value `i`, moving the last one into its place.
    pub fn swap_remove(&mut self, i: usize) -> T {
        let last = self.len - 1;
        self.as_mut_slice().swap(i, last);
        self.pop().expect("non-empty")
    }

    /// The values.
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `len` initialised values at ptr (dangling but aligned when len = 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The values, mutable.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in as_slice; `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Bytes of memory the array maps.
    pub fn mapped_bytes(&self) -> usize {
        (self.cap * std::mem::size_of::<T>()).next_multiple_of(PAGE)
    }
}

impl<T: Copy> std::ops::Deref for PageVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Copy> std::ops::DerefMut for PageVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<'a, T: Copy> IntoIterator for &'a PageVec<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl<T: Copy> Drop for PageVec<T> {
    fn drop(&mut self) {
        self.unmap();
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
    fn page_vec_grows_in_its_own_mapping() {
        let mut v: PageVec<u64> = PageVec::new();
        assert!(v.is_empty() && v.pop().is_none());
        for i in 0..5000u64 {
            v.push(i);
        }
        assert_eq!(v.len(), 5000);
        assert!(v.iter().copied().eq(0..5000));
        assert_eq!(v.swap_remove(0), 0);
        assert_eq!(v[0], 4999);
        assert_eq!(v.pop(), Some(4998));
        assert!(v.mapped_bytes() >= 4998 * 8);
        let w: PageVec<u32> = PageVec::with_capacity(10);
        assert!(w.mapped_bytes() == PAGE && w.is_empty());
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
