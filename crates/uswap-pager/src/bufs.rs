//! The fault path's buffers: a fixed pool of 2 MiB buffers ([`BufPool`]), one per fill in
//! flight, each with a side area ([`Scratch`]) for the per-page arrays that must not be on the
//! stack of the thread that resolves a fault (in SIGBUS mode the program's own, inside a
//! signal handler, maybe small), plus a shared all-zero buffer for zero-fill copies. Reclaim
//! borrows one as a bounce buffer in thread fault mode, and the cached-folio loops of reclaim
//! use a side area too. All in one `MAP_NORESERVE` mapping: untouched buffers cost nothing.
//!
//! Locking: none. A buffer is taken by CAS on a bit mask ([`Slots`]) and given back when its
//! [`Buf`] guard drops; when every buffer is in use a taker yields until one is back (a holder
//! never waits for anything while it holds one, apart from the store and system calls).

use crate::page::{PageWord, MAX_CLAIM};
use crate::slots::Slots;

const NBUF: usize = 32;
const BUF_BYTES: usize = 2 << 20;
const SCRATCH_BYTES: usize = std::mem::size_of::<Scratch>();

/// A fill's side area, next to its buffer: the per-page arrays of a fill, which are too large
/// for the faulting thread's stack (in SIGBUS mode the program's own, inside a signal handler).
pub(crate) struct Scratch {
    /// A [`Claim`](crate::page::Claim)'s old words.
    pub(crate) old: [PageWord; MAX_CLAIM],
    /// A cached folio's kept SWAPPED words (`reclaim::clean_tags`), or any other 512 words.
    pub(crate) kept: [PageWord; MAX_CLAIM],
}

/// A fixed pool of 2 MiB buffers, each with a [`Scratch`] area, taken and returned by CAS on
/// a bit mask ([`Slots`]), plus a shared all-zero buffer (never written) for zero-fill copies.
/// Every fill takes one buffer (one per fill in flight), for its claim's old words at least.
pub(crate) struct BufPool {
    /// `NBUF` buffers, then the zero buffer, then `NBUF` scratch areas.
    mem: crate::own::Mapping,
    /// Which buffers are free.
    free: Slots,
}

impl BufPool {
    /// Reserve the pool (memory is committed on first use of each buffer).
    pub(crate) fn new() -> std::io::Result<BufPool> {
        let mem = crate::own::Mapping::new(NBUF * BUF_BYTES + BUF_BYTES + NBUF * SCRATCH_BYTES)?;
        let pool = BufPool { mem, free: Slots::new(NBUF) };
        // SAFETY: protecting the last 2 MiB of our own mapping, so it stays zero; nothing has
        // a reference into it (the mapping is never viewed as `atomic_words`).
        unsafe { libc::mprotect(pool.zero().cast_mut().cast(), BUF_BYTES, libc::PROT_READ) };
        Ok(pool)
    }

    /// Take a buffer (waits by yielding if all are in use); it goes back to the pool when the
    /// guard is dropped.
    pub(crate) fn take(&self) -> Buf<'_> {
        loop {
            match self.free.try_take() {
                Some(i) => return Buf { pool: self, i },
                None => std::thread::yield_now(),
            }
        }
    }

    /// Take a buffer if one is free now (for a path that holds claimed pages, which must not
    /// wait for a buffer a fill waiting on those pages holds).
    pub(crate) fn try_take(&self) -> Option<Buf<'_>> {
        self.free.try_take().map(|i| Buf { pool: self, i })
    }

    /// In a fork child: every buffer is free (the threads that held one do not exist there).
    pub(crate) fn reset_in_fork_child(&self) {
        self.free.reset();
    }

    /// A read-only all-zero buffer of 2 MiB.
    pub(crate) fn zero(&self) -> *const u8 {
        self.mem.as_ptr().wrapping_add(NBUF * BUF_BYTES)
    }
}

/// A buffer of a [`BufPool`], held from [`BufPool::take`] until dropped (which gives it back):
/// derefs to its [`BUF_BYTES`] bytes; [`Buf::parts`] gives its [`Scratch`] too.
/// Allocation-free and signal-safe, like the pool.
pub(crate) struct Buf<'a> {
    pool: &'a BufPool,
    /// Index of the buffer, which this guard took from `pool.free`.
    i: usize,
}

impl std::ops::Deref for Buf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: buffer i (< NBUF) lies inside the pool's mapping, read-write, and is this
        // guard's alone from take() until drop: it is not free in `free` meanwhile.
        unsafe { std::slice::from_raw_parts(self.pool.mem.as_ptr().add(self.i * BUF_BYTES), BUF_BYTES) }
    }
}

impl std::ops::DerefMut for Buf<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref; &mut self makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.pool.mem.as_ptr().add(self.i * BUF_BYTES), BUF_BYTES) }
    }
}

impl Buf<'_> {
    /// The buffer's bytes and its scratch area.
    pub(crate) fn parts(&mut self) -> (&mut [u8], &mut Scratch) {
        let off = (NBUF + 1) * BUF_BYTES + self.i * SCRATCH_BYTES;
        // SAFETY: scratch area i (< NBUF) lies inside the pool's mapping (after the zero
        // buffer), read-write, 8-aligned (the mapping is page-aligned, the offset a multiple of
        // 8); it is this guard's alone, like its buffer, and disjoint from it; any bytes are a
        // valid Scratch (page words of any bits). &mut self makes the borrow exclusive.
        let scratch = unsafe { &mut *self.pool.mem.as_ptr().add(off).cast::<Scratch>() };
        (&mut **self, scratch)
    }
}

impl Drop for Buf<'_> {
    fn drop(&mut self) {
        self.pool.free.put(self.i);
    }
}
