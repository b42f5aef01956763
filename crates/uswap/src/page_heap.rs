//! Page-granular memory that leaves the process when freed ([`PageHeap`]): the compressed
//! pool's zspages and large objects, the swap tables, the cluster lists' vectors and the swap
//! cache's buffers. It sits at the bottom of the engine (it uses only [`crate::sync`]).
//!
//! The pool's size is charged to a limit (the pager's resident limit counts it, as a memory
//! cgroup counts zswap), so when the pool shrinks its memory must leave the process. A general
//! heap does not do that: glibc's malloc and the dlmalloc inside the LD_PRELOAD library keep
//! freed chunks resident for reuse, so a pool that grew and shrank to nothing would still hold
//! its peak size as RSS. The pool's allocations are whole pages anyway, so they come from here:
//! page-aligned blocks carved from one `MAP_NORESERVE` reservation (address space only; memory
//! is committed on first touch). A freed block has its pages dropped (`MADV_DONTNEED`) and
//! goes on the free list of its page count, so its address range is reused by the next block
//! of that size and reads as zeros until written. Blocks larger than [`MAX_PAGES`] are
//! mappings of their own.
//!
//! Freed blocks are released in batches ([`RELEASE_BATCH`] blocks or [`RELEASE_PAGES`] pages,
//! whichever comes first) by one `process_madvise(2)` on this process: dropping pages flushes
//! the TLB of every CPU the process runs on, and on a VM each such flush is an IPI (a VM exit)
//! per other CPU, so one flush per batch costs far less than one per block. A block waiting in
//! the batch is not on a free list (so a block handed out still reads as zeros) and no longer
//! counts in [`PageHeap::live_bytes`]: the process's RSS may exceed the live bytes by at most
//! [`RELEASE_PAGES`] pages until the batch goes out ([`PageHeap::flush`] sends it now).
//!
//! One heap serves the whole process ([`heap`]): pools come and go (tests create hundreds) and
//! share the reservation.
//!
//! Locking: one mutex per page count guards that free list (held for a push or a pop, never
//! across a system call but the `mmap` of a free list that grows); one more guards the release
//! batch (held to add a block or to take the whole batch out, never across the release
//! itself). Both are of class `PageHeap` and never nested: a full batch is taken out, released
//! with no lock held, and only then are its blocks pushed on their free lists. The bump
//! pointer is an atomic. Nothing here uses the process's allocator once the heap exists: the
//! free lists are [`PageVec`]s, so the pool can grow and shrink on the fault path.

use crate::sync::{LockClass, Mutex};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

const PAGE: usize = 4096;
/// Largest block, in pages, served from the reservation (4 MiB); larger ones are mapped alone.
pub(crate) const MAX_PAGES: usize = 1024;
/// Address space reserved for the heap (never committed as a whole).
const RESERVE: usize = 1 << 40;
/// Freed blocks released together by one `process_madvise` (its vector limit is 1024).
pub(crate) const RELEASE_BATCH: usize = 64;
/// Pages a release batch may hold before it goes out, however few blocks (1 MiB): the bound on
/// freed memory still resident.
pub(crate) const RELEASE_PAGES: usize = 256;

/// Page-aligned, zero-filled blocks of whole pages that give their memory back when freed.
pub struct PageHeap {
    base: usize,
    cap: usize,
    bump: AtomicUsize,
    free: Box<[Mutex<PageVec<usize>>]>,
    /// Freed blocks whose pages are not dropped yet (see the module paragraph).
    pending: Mutex<ReleaseBatch>,
    /// Bytes in blocks handed out and not yet freed.
    live: AtomicU64,
    /// `process_madvise` calls and plain `madvise` calls made to release blocks.
    release_calls: AtomicU64,
}

/// Freed blocks (address, pages) waiting to be released together. A fixed array: freeing runs
/// on the fault path, where nothing may allocate.
#[derive(Clone, Copy)]
struct ReleaseBatch {
    blocks: [(usize, usize); RELEASE_BATCH],
    len: usize,
    pages: usize,
}

impl ReleaseBatch {
    const EMPTY: ReleaseBatch = ReleaseBatch { blocks: [(0, 0); RELEASE_BATCH], len: 0, pages: 0 };

    fn full(&self) -> bool {
        self.len == RELEASE_BATCH || self.pages >= RELEASE_PAGES
    }
}

/// Drop the pages of every range of `iov` (`MADV_DONTNEED`) in this process: one
/// `process_madvise(2)` per 1024 ranges where the kernel allows it (Linux 6.13 lets a process
/// advise itself so; 6.16 flushes the TLB once for the whole vector), else one `madvise` per
/// range. Returns the system calls made. Raw system calls: an `LD_PRELOAD` library embedding
/// the engine interposes `madvise` (see `docs/design.md`, "Deadlock freedom"). The pager's
/// eviction uses it too.
///
/// # Safety
/// - Every range of `iov` is page-aligned private anonymous memory of this process.
/// - The caller gives up the contents of those ranges: afterwards they read as zeros (or fault
///   into whoever manages them), so no reference into them may be alive and nothing may rely
///   on the old bytes.
pub unsafe fn dontneed(iov: &[libc::iovec]) -> u64 {
    // SAFETY: the caller's contract, passed on range by range.
    iov.chunks(1024).map(|c| unsafe { dontneed_chunk(c) }).sum()
}

/// A descriptor that belongs to the process that opened it (a pidfd of itself, its
/// `/proc/self/pagemap`), cached in one atomic word as `pid << 32 | fd`: a fork child, which
/// inherits its parent's, opens its own on first use. An inherited descriptor is never closed:
/// the program may have closed that number and opened a file of its own under it since (a
/// daemon closes every descriptor). Opened by raw system calls where the caller may run (a
/// fault path, a signal handler): no allocation, no lock.
///
/// Locking: none; one CAS publishes a descriptor, and a thread that loses the race closes its
/// own, which no one else has seen.
pub struct ProcessFd(std::sync::atomic::AtomicI64);

impl ProcessFd {
    /// No descriptor yet.
    pub const fn new() -> ProcessFd {
        ProcessFd(std::sync::atomic::AtomicI64::new(-1))
    }

    /// This process's descriptor: the cached one if this process opened it, else the one
    /// `open(pid)` returns (None: it could not; asked again next time).
    pub fn get(&self, open: impl FnOnce(i64) -> Option<i32>) -> Option<i32> {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::syscall(libc::SYS_getpid) };
        let cur = self.0.load(Ordering::Acquire);
        let fd_of = |packed: i64| (packed & 0xffff_ffff) as i32;
        if cur >= 0 && cur >> 32 == pid {
            return Some(fd_of(cur));
        }
        let fd = open(pid)?;
        match self.0.compare_exchange(cur, (pid << 32) | i64::from(fd), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Some(fd),
            Err(now) => {
                // SAFETY: closing the descriptor `open` just returned, never published.
                unsafe { libc::syscall(libc::SYS_close, fd) };
                (now >= 0 && now >> 32 == pid).then(|| fd_of(now))
            }
        }
    }

    /// Forget the descriptor (the program closed it): the next [`ProcessFd::get`] opens one.
    pub(crate) fn forget(&self) {
        self.0.store(-1, Ordering::Release);
    }
}

impl Default for ProcessFd {
    fn default() -> Self {
        ProcessFd::new()
    }
}

// The pidfd names the process that opened it: a fork child opens its own. An advice on
// another process's pidfd would fail anyway (remote MADV_DONTNEED is refused), never drop its
// pages.
static PIDFD: ProcessFd = ProcessFd::new();
static UNSUPPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn open_pidfd(pid: i64) -> Option<i32> {
    // SAFETY: pidfd_open(pid, 0) returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        // No pidfds here (an old kernel, or a seccomp filter): one madvise per block.
        UNSUPPORTED.store(true, Ordering::Relaxed);
    }
    i32::try_from(fd).ok().filter(|&fd| fd >= 0)
}

/// Open this process's pidfd for [`dontneed`] now, if it has none: where a new descriptor
/// cannot take a number the program is about to use (a pager being made, a fork child before
/// its threads run), rather than on the first batch, which a background thread may advise
/// (`uswap::procfs` says why that matters).
pub fn prime_pidfd() {
    PIDFD.get(open_pidfd);
}

/// [`dontneed`] of at most 1024 ranges (`UIO_MAXIOV`).
///
/// # Safety
/// As for [`dontneed`].
unsafe fn dontneed_chunk(iov: &[libc::iovec]) -> u64 {
    let n = iov.len();
    let total: usize = iov.iter().map(|v| v.iov_len).sum();
    let mut calls = 0;
    if n > 1 && !UNSUPPORTED.load(Ordering::Relaxed) {
        let fd = PIDFD.get(open_pidfd).unwrap_or(-1);
        if fd >= 0 {
            // SAFETY: process_madvise reads the `n` iovecs of `iov`; the caller gives up the
            // contents of those ranges of its own memory (DONTNEED on private anonymous memory).
            let r = unsafe { libc::syscall(libc::SYS_process_madvise, fd, iov.as_ptr(), n, libc::MADV_DONTNEED, 0) };
            calls += 1;
            if r >= 0 && r as usize == total {
                return 1;
            }
            match (r < 0).then(|| std::io::Error::last_os_error().raw_os_error()).flatten() {
                // The program closed our descriptor (a daemon closing every fd): open again.
                Some(libc::EBADF) => PIDFD.forget(),
                // A kernel before 6.13 (self-advice of MADV_DONTNEED through a pidfd is
                // refused), no process_madvise, or a seccomp filter: one madvise per block.
                Some(libc::EINVAL | libc::ENOSYS | libc::EPERM) => UNSUPPORTED.store(true, Ordering::Relaxed),
                _ => {}
            }
        }
    }
    // One by one (DONTNEED is idempotent, so a partial batch is simply advised again).
    for v in iov {
        // SAFETY: as above, one range at a time.
        unsafe { libc::syscall(libc::SYS_madvise, v.iov_base, v.iov_len, libc::MADV_DONTNEED) };
    }
    calls + n as u64
}

/// Drop the pages of freed heap blocks (address, pages) with [`dontneed`].
///
/// # Safety
/// - Every block is a block of a [`PageHeap`] that has been freed and is not handed out again
///   before this returns.
unsafe fn release(blocks: &[(usize, usize)]) -> u64 {
    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; RELEASE_BATCH];
    let n = blocks.len().min(RELEASE_BATCH);
    for (v, &(a, pages)) in iov.iter_mut().zip(blocks) {
        *v = libc::iovec { iov_base: a as *mut libc::c_void, iov_len: pages * PAGE };
    }
    // SAFETY: freed heap blocks (this function's contract): anonymous pages of the heap's
    // reservation that no one uses.
    unsafe { dontneed(&iov[..n]) }
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
            pending: Mutex::new(LockClass::PageHeap, ReleaseBatch::EMPTY),
            live: AtomicU64::new(0),
            release_calls: AtomicU64::new(0),
        }
    }

    fn pages(bytes: usize) -> usize {
        bytes.max(1).div_ceil(PAGE)
    }

    /// A page-aligned block of at least `bytes` bytes whose contents are unspecified (the
    /// caller overwrites all of it): a block freed earlier and still waiting in the release
    /// batch if one is large enough (its pages are resident, so using them costs no page fault,
    /// no zeroing and no release; a larger block is split), else [`PageHeap::alloc`]. A drain
    /// into memory fills fresh folios while the pool it empties frees zspages: this hands
    /// the one's pages to the other.
    pub fn alloc_dirty(&self, bytes: usize) -> Option<NonNull<u8>> {
        let n = Self::pages(bytes);
        if n < RELEASE_PAGES {
            let mut b = self.pending.lock();
            let len = b.len;
            if let Some(i) = b.blocks[..len].iter().rposition(|&(_, p)| p >= n) {
                let (a, p) = b.blocks[i];
                if p == n {
                    b.blocks[i] = b.blocks[len - 1];
                    b.len -= 1;
                } else {
                    // The rest stays a block of its own, released (and listed) by its size.
                    b.blocks[i] = (a + n * PAGE, p - n);
                }
                b.pages -= n;
                drop(b);
                self.live.fetch_add((n * PAGE) as u64, Ordering::Relaxed);
                return NonNull::new(a as *mut u8);
            }
        }
        self.alloc(bytes)
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

    /// Release a block: its memory goes back to the kernel with the next release batch (at
    /// once for a block of `RELEASE_PAGES` pages or more).
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
        if n >= RELEASE_PAGES {
            self.release_now(&[(a, n)]);
            return;
        }
        let batch = {
            let mut b = self.pending.lock();
            let i = b.len;
            b.blocks[i] = (a, n);
            b.len += 1;
            b.pages += n;
            if !b.full() {
                return;
            }
            std::mem::replace(&mut *b, ReleaseBatch::EMPTY)
        };
        self.release_now(&batch.blocks[..batch.len]);
    }

    /// Release every freed block still waiting in the batch.
    pub fn flush(&self) {
        let batch = std::mem::replace(&mut *self.pending.lock(), ReleaseBatch::EMPTY);
        self.release_now(&batch.blocks[..batch.len]);
    }

    /// Drop the pages of `blocks` (no lock held), then put each on its free list: from there
    /// it reads as zeros.
    fn release_now(&self, blocks: &[(usize, usize)]) {
        if blocks.is_empty() {
            return;
        }
        // SAFETY: `blocks` were freed by their owners (`free`'s contract) and are on no free
        // list until the loop below: no one can be handed them meanwhile.
        self.release_calls.fetch_add(unsafe { release(blocks) }, Ordering::Relaxed);
        for &(a, n) in blocks {
            self.free[n].lock().push(a);
        }
    }

    /// System calls made so far to release freed blocks.
    #[cfg(test)]
    pub(crate) fn release_calls(&self) -> u64 {
        self.release_calls.load(Ordering::Relaxed)
    }

    /// Bytes in blocks handed out and not freed (what the heap holds in memory, at most).
    pub fn live_bytes(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }
}

/// Fault in the pages of many blocks ahead of writing them, with one
/// `madvise(MADV_POPULATE_WRITE)` per run of adjacent blocks instead of one page fault per
/// page (blocks handed out one after another by the bump pointer are adjacent). `blocks` are
/// (address, bytes), page-aligned; sorted here. Best effort: a range the kernel refuses is
/// simply faulted in when written. Returns the system calls made.
pub(crate) fn populate(blocks: &mut [(usize, usize)]) -> u64 {
    blocks.sort_unstable();
    let mut calls = 0;
    let mut i = 0;
    while i < blocks.len() {
        let (start, mut end) = (blocks[i].0, blocks[i].0 + blocks[i].1);
        i += 1;
        while i < blocks.len() && blocks[i].0 == end {
            end += blocks[i].1;
            i += 1;
        }
        if end > start {
            // SAFETY: prefaulting whole pages of blocks the caller owns and is about to write;
            // POPULATE_WRITE changes no contents (fresh pages read as zeros either way).
            unsafe { libc::syscall(libc::SYS_madvise, start, end - start, libc::MADV_POPULATE_WRITE) };
            calls += 1;
        }
    }
    calls
}

/// An owned, page-aligned buffer of whole pages from the process's [`heap`] (swap-cache folio
/// data, the file tier's I/O buffers): no allocator lock, no heap growth by `mprotect` or `brk` per
/// buffer, and its memory leaves the process (in the next release batch) when it is dropped.
pub(crate) struct PageBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a PageBuf owns its block exclusively, like a Box<[u8]> its buffer.
unsafe impl Send for PageBuf {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for PageBuf {}

impl PageBuf {
    /// The empty buffer (no memory).
    pub(crate) const EMPTY: PageBuf = PageBuf { ptr: NonNull::dangling(), len: 0 };

    /// A zero-filled buffer of `len` bytes (a multiple of the page size), or None when no
    /// memory or address space is left.
    pub(crate) fn zeroed(len: usize) -> Option<PageBuf> {
        Self::new(len, false)
    }

    /// A buffer of `len` bytes (a multiple of the page size) whose contents are unspecified
    /// (stale bytes of this process: see [`PageHeap::alloc_dirty`]), for a caller that writes
    /// all of it before reading; None when no memory or address space is left.
    pub(crate) fn dirty(len: usize) -> Option<PageBuf> {
        Self::new(len, true)
    }

    fn new(len: usize, dirty: bool) -> Option<PageBuf> {
        debug_assert!(len.is_multiple_of(PAGE), "PageBuf of {len} bytes");
        if len == 0 {
            return Some(PageBuf::EMPTY);
        }
        Self::from_heap(len, dirty)
    }

    /// The start of the buffer, for a system call that writes into it (I/O).
    pub(crate) fn as_raw(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    #[cfg(not(loom))]
    fn from_heap(len: usize, dirty: bool) -> Option<PageBuf> {
        let ptr = if dirty { heap().alloc_dirty(len) } else { heap().alloc(len) };
        ptr.map(|ptr| PageBuf { ptr, len })
    }

    /// Under loom the process-wide heap (whose locks would be loom objects outliving the
    /// model's execution) is not used: the buffer is an ordinary zeroed allocation.
    #[cfg(loom)]
    fn from_heap(len: usize, _dirty: bool) -> Option<PageBuf> {
        let b: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        NonNull::new(Box::into_raw(b).cast::<u8>()).map(|ptr| PageBuf { ptr, len })
    }
}

impl Default for PageBuf {
    fn default() -> Self {
        PageBuf::EMPTY
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` bytes (a heap block we own, or dangling with 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        if self.len > 0 {
            #[cfg(not(loom))]
            // SAFETY: allocated by `from_heap` from `heap()` with this length; dropped once.
            unsafe {
                heap().free(self.ptr, self.len)
            };
            #[cfg(loom)]
            // SAFETY: a Box<[u8]> of this length leaked by `from_heap`; dropped once.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len)) });
        }
    }
}

/// Plain values whose all-zero bytes are a valid value, so a fresh anonymous mapping holds
/// an array of them ([`PageVec::zeroed`]).
///
/// # Safety
/// - Every bit pattern of all zero bytes must be a valid `Self`.
pub(crate) unsafe trait Zeroable: Copy {}
// SAFETY: zero is a valid integer.
unsafe impl Zeroable for u16 {}
// SAFETY: as above.
unsafe impl Zeroable for u32 {}
// SAFETY: as above.
unsafe impl Zeroable for u64 {}

/// A growable array of plain values in memory of its own mapping, not the heap: the pool's
/// metadata (zspage tables, fullness lists, free ids) and the page heap's free lists, which
/// grow on the fault path (a store in direct reclaim), where the process's allocator is
/// off limits (see `docs/design.md`, "Deadlock freedom"). Growing maps a block twice the size
/// (whole pages), copies, and unmaps the old one: system calls, no lock.
pub(crate) struct PageVec<T: Copy> {
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
    pub(crate) const fn new() -> Self {
        const { assert!(std::mem::size_of::<T>() > 0 && std::mem::align_of::<T>() <= PAGE) };
        PageVec { ptr: NonNull::dangling(), len: 0, cap: 0 }
    }

    /// An empty array with room for `n` values.
    #[cfg(test)]
    pub(crate) fn with_capacity(n: usize) -> Self {
        let mut v = Self::new();
        if n > 0 {
            v.grow_to(n);
        }
        v
    }

    /// An array of `n` zeros in a fresh mapping, whose pages cost nothing until written. A
    /// `vec![0; n]` is that only where the allocator maps large blocks fresh: the preload
    /// library's internal heap writes every byte of a block under 256 KiB, and arrays such as
    /// the cluster lists' links (320 KiB for a 64 GiB swap file, in three arrays) would cost
    /// zero-fill page faults in every process `uswap run` starts, for pages nearly all never
    /// read again.
    pub(crate) fn zeroed(n: usize) -> Self
    where
        T: Zeroable,
    {
        let mut v = Self::new();
        if n > 0 {
            v.grow_to(n);
            // A fresh anonymous mapping reads as zeros, a valid `T` (`Zeroable`).
            v.len = n;
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
    pub(crate) fn push(&mut self, v: T) {
        if self.len == self.cap {
            self.grow_to((self.cap * 2).max(PAGE / std::mem::size_of::<T>()).max(1));
        }
        // SAFETY: len < cap: inside the mapping.
        unsafe { self.ptr.as_ptr().add(self.len).write(v) };
        self.len += 1;
    }

    /// Remove and return the last value.
    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: index len (old len - 1) is initialised.
        Some(unsafe { self.ptr.as_ptr().add(self.len).read() })
    }

    /// Remove value `i`, moving the last one into its place.
    pub(crate) fn swap_remove(&mut self, i: usize) -> T {
        let last = self.len - 1;
        self.as_mut_slice().swap(i, last);
        self.pop().expect("non-empty")
    }

    /// The values.
    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: `len` initialised values at ptr (dangling but aligned when len = 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The values, mutable.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in as_slice; `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Bytes of memory the array maps.
    #[cfg(test)]
    pub(crate) fn mapped_bytes(&self) -> usize {
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

    /// A zeroed array costs no page until written: the cluster lists of every swap space rely
    /// on it (a `vec![0; n]` from the preload library's heap wrote all of them).
    #[test]
    fn a_zeroed_page_vec_is_resident_only_where_written() {
        let n = 64 * PAGE / 4;
        let mut v: PageVec<u32> = PageVec::zeroed(n);
        assert_eq!(v.len(), n);
        let base = NonNull::new(v.as_mut_slice().as_mut_ptr().cast::<u8>()).expect("mapped");
        assert_eq!(resident(base, v.mapped_bytes()), 0, "a fresh zeroed array is resident");
        v[5 * PAGE / 4] = 7;
        assert_eq!(resident(base, v.mapped_bytes()), PAGE, "one write made one page resident");
        assert!(v.iter().enumerate().all(|(i, &x)| x == if i == 5 * PAGE / 4 { 7 } else { 0 }));
        assert!(PageVec::<u16>::zeroed(0).is_empty());
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
    fn freed_blocks_wait_for_a_full_batch_then_leave_together() {
        let h = PageHeap::new(1 << 30);
        let blocks: Vec<_> = (0..RELEASE_BATCH).map(|_| h.alloc(PAGE).unwrap()).collect();
        for b in &blocks {
            // SAFETY: our one-page block.
            unsafe { std::ptr::write_bytes(b.as_ptr(), 0xcd, PAGE) };
        }
        let calls = h.release_calls();
        for b in &blocks[..RELEASE_BATCH - 1] {
            // SAFETY: allocated above with this size, not used again.
            unsafe { h.free(*b, PAGE) };
        }
        assert_eq!(h.live_bytes(), PAGE as u64, "a block waiting for release is no longer live");
        assert_eq!(h.release_calls(), calls, "released before the batch was full");
        assert!(blocks[..RELEASE_BATCH - 1].iter().all(|&b| resident(b, PAGE) == PAGE));
        // Not handed out again while its old contents are still there.
        let fresh = h.alloc(PAGE).unwrap();
        assert!(!blocks.contains(&fresh));
        // SAFETY: the last block of the batch: one release call for all of them.
        unsafe { h.free(blocks[RELEASE_BATCH - 1], PAGE) };
        assert_eq!(h.release_calls(), calls + 1, "one process_madvise for the whole batch");
        assert!(blocks.iter().all(|&b| resident(b, PAGE) == 0), "a released block stayed resident");
        let again = h.alloc(PAGE).unwrap();
        assert!(blocks.contains(&again));
        // SAFETY: reading our block.
        assert!(unsafe { std::slice::from_raw_parts(again.as_ptr(), PAGE) }.iter().all(|&x| x == 0));
        // SAFETY: each freed once with its size; `flush` releases the two left waiting.
        unsafe {
            h.free(again, PAGE);
            h.free(fresh, PAGE);
        }
        h.flush();
        assert_eq!(resident(again, PAGE) + resident(fresh, PAGE), 0);
        assert_eq!(h.live_bytes(), 0);
    }

    #[test]
    fn populate_faults_in_adjacent_blocks_with_one_call_per_run() {
        let h = PageHeap::new(1 << 30);
        let mut bufs: Vec<PageBuf> = Vec::new();
        for _ in 0..8 {
            let p = h.alloc(2 * PAGE).unwrap();
            bufs.push(PageBuf { ptr: p, len: 2 * PAGE });
        }
        // Blocks 0..4 and 5..8 are adjacent runs (bump order); leave a gap at 4.
        let mut ranges: Vec<(usize, usize)> =
            bufs.iter().enumerate().filter(|(i, _)| *i != 4).map(|(_, b)| (b.ptr.as_ptr() as usize, b.len)).collect();
        ranges.reverse(); // populate sorts
        assert!(bufs.iter().all(|b| resident(b.ptr, b.len) == 0));
        assert_eq!(populate(&mut ranges), 2);
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(resident(b.ptr, b.len), if i == 4 { 0 } else { 2 * PAGE }, "block {i}");
            assert!(b.iter().all(|&x| x == 0), "populated memory reads as zeros");
        }
        for b in bufs {
            // SAFETY: each allocated above from `h` with this size, freed once (not through
            // PageBuf's Drop, which frees to the process's heap).
            unsafe { h.free(b.ptr, b.len) };
            std::mem::forget(b);
        }
    }

    #[test]
    fn page_bufs_are_zeroed_and_page_aligned() {
        // The process's heap is shared with tests running alongside: compare live bytes
        // through one buffer's life only loosely (others may allocate meanwhile).
        let mut b = PageBuf::zeroed(4 * PAGE).unwrap();
        assert_eq!((b.as_ptr() as usize % PAGE, b.len()), (0, 4 * PAGE));
        assert!(b.iter().all(|&x| x == 0));
        b.fill(0x5a);
        assert!(heap().live_bytes() >= 4 * PAGE as u64);
        drop(b);
        assert!(PageBuf::EMPTY.is_empty() && PageBuf::default().is_empty());
    }

    #[test]
    fn dirty_blocks_come_from_the_release_batch_and_leave_it() {
        let h = PageHeap::new(1 << 30);
        let a = h.alloc(4 * PAGE).unwrap();
        let b = h.alloc(PAGE).unwrap();
        // SAFETY: our blocks, written then freed once each.
        unsafe {
            std::ptr::write_bytes(a.as_ptr(), 0x11, 4 * PAGE);
            std::ptr::write_bytes(b.as_ptr(), 0x22, PAGE);
            h.free(a, 4 * PAGE);
            h.free(b, PAGE);
        }
        assert_eq!(h.live_bytes(), 0);
        let calls = h.release_calls();
        // A one-page block: the last fitting one (b), resident, no system call.
        let d1 = h.alloc_dirty(PAGE).unwrap();
        assert_eq!(d1, b);
        // Three pages out of a's four: a's first three; its last page stays in the batch.
        let d3 = h.alloc_dirty(3 * PAGE).unwrap();
        assert_eq!(d3, a);
        assert_eq!(h.live_bytes(), 4 * PAGE as u64);
        assert_eq!(h.release_calls(), calls);
        assert_eq!(resident(d3, 3 * PAGE), 3 * PAGE);
        // Nothing left that fits two pages: a fresh (zeroed) block.
        let d2 = h.alloc_dirty(2 * PAGE).unwrap();
        assert!(d2 != a && d2 != b);
        // SAFETY: reading our fresh block.
        assert!(unsafe { std::slice::from_raw_parts(d2.as_ptr(), 2 * PAGE) }.iter().all(|&x| x == 0));
        // The flush releases only a's last page: the blocks handed out keep their memory.
        h.flush();
        assert_eq!(h.release_calls(), calls + 1);
        // SAFETY: a + 3 pages is inside a's old block.
        let tail = unsafe { NonNull::new_unchecked(a.as_ptr().add(3 * PAGE)) };
        assert_eq!(resident(tail, PAGE), 0);
        assert_eq!(resident(d3, 3 * PAGE), 3 * PAGE);
        // SAFETY: reading our blocks (stale contents: they were not released).
        assert_eq!(unsafe { *d3.as_ptr() }, 0x11);
        // SAFETY: as above.
        assert_eq!(unsafe { *d1.as_ptr() }, 0x22);
        // And the split-off page is an ordinary one-page block now.
        assert_eq!(h.alloc(PAGE).unwrap(), tail);
        // SAFETY: every block freed once with the size it was handed out with.
        unsafe {
            h.free(d1, PAGE);
            h.free(d3, 3 * PAGE);
            h.free(d2, 2 * PAGE);
            h.free(tail, PAGE);
        }
        h.flush();
        assert_eq!(h.live_bytes(), 0);
    }

    #[test]
    fn a_fork_child_releases_its_own_pages() {
        let h = PageHeap::new(1 << 30);
        // The parent opens its pidfd first.
        let warm: Vec<_> = (0..RELEASE_BATCH).map(|_| h.alloc(PAGE).unwrap()).collect();
        for b in &warm {
            // SAFETY: our block, freed once.
            unsafe {
                std::ptr::write_bytes(b.as_ptr(), 1, PAGE);
                h.free(*b, PAGE);
            }
        }
        let blocks: Vec<_> = (0..RELEASE_BATCH).map(|_| h.alloc(PAGE).unwrap()).collect();
        for b in &blocks {
            // SAFETY: our block.
            unsafe { std::ptr::write_bytes(b.as_ptr(), 0xee, PAGE) };
        }
        // SAFETY: the child only frees (no allocation: the batch is a fixed array), checks
        // with mincore into a stack byte and leaves through _exit: nothing a lock held by
        // another thread of the parent at the fork could block.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            for b in &blocks {
                // SAFETY: the child's copy of our block, freed once.
                unsafe { h.free(*b, PAGE) };
            }
            let ok = blocks.iter().all(|&b| {
                let mut v = 0u8;
                // SAFETY: one page-aligned page of ours, one byte out.
                unsafe { libc::mincore(b.as_ptr().cast(), PAGE, &mut v) == 0 && v & 1 == 0 }
            });
            // SAFETY: leaving the child without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut st = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
        assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0, "the child's freed blocks stayed resident");
        // The parent's copies are untouched.
        for b in &blocks {
            // SAFETY: reading our block.
            assert!(unsafe { std::slice::from_raw_parts(b.as_ptr(), PAGE) }.iter().all(|&x| x == 0xee));
            // SAFETY: freed once.
            unsafe { h.free(*b, PAGE) };
        }
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
