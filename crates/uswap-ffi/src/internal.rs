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

/// Address space of the internal heap: one `MAP_NORESERVE` reservation, so that "is this
/// block ours?" is a range check ([`owns`]) and the pager never adopts it.
const RESERVE: usize = 64 << 30;
/// Granule of the reservation handed to dlmalloc.
const CHUNK: usize = 64 << 10;
const NCHUNKS: usize = RESERVE / CHUNK;

static BASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

struct Bitmap(UnsafeCell<[u64; NCHUNKS / 64]>);
// SAFETY: only touched by RawMmap's methods, which dlmalloc calls with the heap's lock held.
unsafe impl Sync for Bitmap {}
static USED: Bitmap = Bitmap(UnsafeCell::new([0; NCHUNKS / 64]));

fn base() -> usize {
    let b = BASE.load(Ordering::Acquire);
    if b != 0 {
        return b;
    }
    let _making = uswap_pager::own::making();
    // SAFETY: a fresh private anonymous reservation (pages cost nothing until touched).
    let p = unsafe {
        sys_mmap(
            std::ptr::null_mut(),
            RESERVE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return 0;
    }
    uswap_pager::own::add(p as usize, RESERVE);
    BASE.store(p as usize, Ordering::Release);
    p as usize
}

/// True if `p` points into the internal heap.
#[inline]
pub fn owns(p: *const libc::c_void) -> bool {
    let b = BASE.load(Ordering::Relaxed);
    b != 0 && (p as usize).wrapping_sub(b) < RESERVE
}

/// The chunk bitmap.
///
/// # Safety
/// - Called with the heap's lock held (dlmalloc's system allocator calls are), and the
///   reference is dropped before the lock is released.
unsafe fn bits() -> &'static mut [u64; NCHUNKS / 64] {
    // SAFETY: exclusive under the heap lock (caller's obligation).
    unsafe { &mut *USED.0.get() }
}

impl RawMmap {
    fn set(bits: &mut [u64], from: usize, n: usize, on: bool) {
        for i in from..from + n {
            if on {
                bits[i / 64] |= 1 << (i % 64);
            } else {
                bits[i / 64] &= !(1 << (i % 64));
            }
        }
    }
    fn release(&self, ptr: *mut u8, size: usize) -> bool {
        let b = base();
        let off = ptr as usize - b;
        if !off.is_multiple_of(CHUNK) || size == 0 {
            return false;
        }
        let n = size.div_ceil(CHUNK);
        // SAFETY: giving the pages back; the range is ours and unused from now on.
        unsafe { libc::syscall(libc::SYS_madvise, ptr, n * CHUNK, libc::MADV_DONTNEED) };
        // SAFETY: under the heap lock (dlmalloc calls us with it held).
        Self::set(unsafe { bits() }, off / CHUNK, n, false);
        MAPPED.fetch_sub((n * CHUNK) as u64, Ordering::Relaxed);
        true
    }
}

// SAFETY: the methods hand out unused, zero-filled chunks of the reservation (or null) and take
// back only what they handed out, which is what dlmalloc's Allocator contract asks; dlmalloc
// calls them with the heap's lock held, which guards the bitmap.
unsafe impl Allocator for RawMmap {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        let b = base();
        if b == 0 {
            return (std::ptr::null_mut(), 0, 0);
        }
        let n = size.div_ceil(CHUNK);
        // SAFETY: under the heap lock.
        let bits = unsafe { bits() };
        let mut run = 0;
        let mut i = 0;
        while i < NCHUNKS {
            if bits[i / 64] == u64::MAX && run == 0 {
                i += 64 - i % 64;
                continue;
            }
            if bits[i / 64] & (1 << (i % 64)) == 0 {
                run += 1;
                if run == n {
                    let first = i + 1 - n;
                    Self::set(bits, first, n, true);
                    MAPPED.fetch_add((n * CHUNK) as u64, Ordering::Relaxed);
                    return ((b + first * CHUNK) as *mut u8, n * CHUNK, 0);
                }
            } else {
                run = 0;
            }
            i += 1;
        }
        (std::ptr::null_mut(), 0, 0)
    }
    fn remap(&self, _ptr: *mut u8, _oldsize: usize, _newsize: usize, _can_move: bool) -> *mut u8 {
        std::ptr::null_mut()
    }
    fn free_part(&self, ptr: *mut u8, oldsize: usize, newsize: usize) -> bool {
        let keep = newsize.div_ceil(CHUNK) * CHUNK;
        if keep >= oldsize {
            return false;
        }
        self.release(ptr.wrapping_add(keep), oldsize - keep)
    }
    fn free(&self, ptr: *mut u8, size: usize) -> bool {
        self.release(ptr, size)
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
