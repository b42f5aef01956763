//! The library's own heap: Rust allocations inside the library (pager metadata, the engine,
//! threads' bookkeeping) and the program's allocations before the pager is up.
//!
//! It must never go through `malloc`/`mmap` symbols, because this library exports those
//! (LD_PRELOAD): a call from inside would recurse into the interposed versions. So it is a
//! `dlmalloc` over raw `mmap`/`munmap`/`mremap` system calls, and it is this crate's
//! `#[global_allocator]`. Its memory is not paged: it is part of the fixed overhead reported by
//! `uswap run`.
//!
//! Locking: one [`RawLock`] around the dlmalloc instance; [`crate::fork`] holds it across
//! `fork` so the child inherits a consistent heap.

use crate::lock::RawLock;
use dlmalloc::{Allocator, Dlmalloc};
use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Raw anonymous mappings for dlmalloc's segments.
pub struct RawMmap;

/// Bytes currently mapped by the internal heap.
pub static MAPPED: AtomicU64 = AtomicU64::new(0);

/// `mmap(2)` through the system call (never the interposed symbol).
///
/// # Safety
/// - As for `mmap(2)`: with `MAP_FIXED` the caller must own the range being replaced.
pub unsafe fn sys_mmap(
    addr: *mut libc::c_void,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    off: i64,
) -> *mut libc::c_void {
    // SAFETY: forwarded to the kernel, which validates the arguments.
    unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut libc::c_void }
}

/// `munmap(2)` through the system call.
///
/// # Safety
/// - The caller owns `[addr, addr+len)`; nothing may use it afterwards.
pub unsafe fn sys_munmap(addr: *mut libc::c_void, len: usize) -> i32 {
    // SAFETY: forwarded to the kernel.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as i32 }
}

// SAFETY: the methods return fresh anonymous mappings (or null) and release only what they
// were given, which is what dlmalloc's Allocator contract asks.
unsafe impl Allocator for RawMmap {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        // SAFETY: a fresh private anonymous mapping.
        let p = unsafe {
            sys_mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return (std::ptr::null_mut(), 0, 0);
        }
        MAPPED.fetch_add(size as u64, Ordering::Relaxed);
        (p.cast(), size, 0)
    }
    #[allow(
        clippy::not_unsafe_ptr_arg_deref,
        reason = "dlmalloc's Allocator signature; ptr is always a mapping this allocator made"
    )]
    fn remap(&self, ptr: *mut u8, oldsize: usize, newsize: usize, can_move: bool) -> *mut u8 {
        let flags = if can_move { libc::MREMAP_MAYMOVE } else { 0 };
        // SAFETY: ptr/oldsize name a mapping this allocator made.
        let p = unsafe { libc::syscall(libc::SYS_mremap, ptr, oldsize, newsize, flags) as *mut libc::c_void };
        if p == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        MAPPED.fetch_add(newsize as u64, Ordering::Relaxed);
        MAPPED.fetch_sub(oldsize as u64, Ordering::Relaxed);
        p.cast()
    }
    #[allow(
        clippy::not_unsafe_ptr_arg_deref,
        reason = "dlmalloc's Allocator signature; ptr is always a mapping this allocator made"
    )]
    fn free_part(&self, ptr: *mut u8, oldsize: usize, newsize: usize) -> bool {
        // SAFETY: the tail of a mapping this allocator made.
        let ok = unsafe { sys_munmap(ptr.add(newsize).cast(), oldsize - newsize) } == 0;
        if ok {
            MAPPED.fetch_sub((oldsize - newsize) as u64, Ordering::Relaxed);
        }
        ok
    }
    fn free(&self, ptr: *mut u8, size: usize) -> bool {
        // SAFETY: a whole mapping this allocator made.
        let ok = unsafe { sys_munmap(ptr.cast(), size) } == 0;
        if ok {
            MAPPED.fetch_sub(size as u64, Ordering::Relaxed);
        }
        ok
    }
    fn can_release_part(&self, _flags: u32) -> bool {
        true
    }
    fn allocates_zeros(&self) -> bool {
        true
    }
    fn page_size(&self) -> usize {
        4096
    }
}

/// A dlmalloc instance behind a [`RawLock`], usable as a C-style or Rust allocator.
pub struct LockedHeap<A: Allocator> {
    /// The lock (public for fork handling).
    pub lock: RawLock,
    heap: UnsafeCell<Dlmalloc<A>>,
}

// SAFETY: the dlmalloc instance is only touched with `lock` held.
unsafe impl<A: Allocator> Sync for LockedHeap<A> {}

impl<A: Allocator> LockedHeap<A> {
    /// A heap over `a`.
    pub const fn new(a: A) -> Self {
        LockedHeap { lock: RawLock::new(), heap: UnsafeCell::new(Dlmalloc::new_with_allocator(a)) }
    }

    /// Run `f` on the heap with the lock held.
    pub fn with<R>(&self, f: impl FnOnce(&mut Dlmalloc<A>) -> R) -> R {
        self.lock.lock();
        // SAFETY: exclusive under the lock.
        let r = f(unsafe { &mut *self.heap.get() });
        self.lock.unlock();
        r
    }

    /// Run `f` on the heap; the caller already holds the lock.
    ///
    /// # Safety
    /// - The calling thread must hold `self.lock`.
    pub unsafe fn with_locked<R>(&self, f: impl FnOnce(&mut Dlmalloc<A>) -> R) -> R {
        // SAFETY: exclusive under the lock (caller's obligation).
        f(unsafe { &mut *self.heap.get() })
    }
}

/// The internal heap.
pub static HEAP: LockedHeap<RawMmap> = LockedHeap::new(RawMmap);

/// Usable size of a block from any dlmalloc instance (the chunk header sits just before it).
///
/// # Safety
/// - `p` must be a live block returned by a dlmalloc instance.
pub unsafe fn usable_size(p: *const u8) -> usize {
    // SAFETY: dlmalloc keeps the chunk's head word (size | flags) in the word before the block.
    let head = unsafe { *(p as *const usize).sub(1) };
    let size = head & !7;
    // Chunks from a direct system allocation have neither in-use bit and a larger overhead.
    let overhead = if head & 3 == 0 { 16 } else { 8 };
    size.saturating_sub(overhead)
}

/// The Rust global allocator of this library: the internal heap.
pub struct Internal;

// SAFETY: delegates to dlmalloc under its lock, which honours size and alignment.
unsafe impl GlobalAlloc for Internal {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: dlmalloc's contract mirrors GlobalAlloc's.
        HEAP.with(|h| unsafe { h.malloc(l.size(), l.align()) })
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as above.
        HEAP.with(|h| unsafe { h.calloc(l.size(), l.align()) })
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: p came from this allocator with layout l (caller's GlobalAlloc obligation).
        HEAP.with(|h| unsafe { h.free(p, l.size(), l.align()) })
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as above.
        HEAP.with(|h| unsafe { h.realloc(p, l.size(), l.align(), new) })
    }
}

/// Bytes of memory the internal heap holds from the system.
pub fn mapped_bytes() -> u64 {
    MAPPED.load(Ordering::Relaxed)
}
