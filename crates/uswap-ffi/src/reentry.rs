//! Re-entry state: whether the calling thread is running uswap code.
//!
//! Interposed calls (`malloc`, `mmap`, `madvise`, `sigaction`…) made by uswap code itself must
//! pass straight to the system: the pager's threads, its fault handler and the fork handlers run
//! through [`internal`], and the interposers ask [`in_internal`]. A leaf module: it imports
//! nothing of the crate, so every layer above may use it.
//!
//! It also holds [`KeepErrno`]: an interposer that succeeds leaves `errno` as it found it, as
//! libc's functions do, whatever system calls the pager made on the way.
//!
//! Locking: none; the state is one thread-local counter.

use std::cell::Cell;

thread_local! {
    /// > 0 while this thread runs uswap code: interposed `mmap`/`madvise`/`sigaction` pass
    /// straight to the system for it.
    pub static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Run `f` as uswap code (see [`DEPTH`]).
pub fn internal<R>(f: impl FnOnce() -> R) -> R {
    DEPTH.with(|d| d.set(d.get() + 1));
    let r = f();
    DEPTH.with(|d| d.set(d.get() - 1));
    r
}

/// True while the calling thread runs uswap code.
pub fn in_internal() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// The calling thread's `errno` at an interposer's entry, put back when the call succeeds
/// ([`KeepErrno::ok`]). The pager's work inside an interposed call (a reconciliation pass, a
/// `sigdelset` of glibc's internal signals, a prefault retry after `EFAULT`) makes system calls
/// that may fail and set `errno`; programs read `errno` after a later call that succeeded
/// (PostgreSQL's postmaster checks `select`'s `errno` after a `sigprocmask`: it read EINVAL
/// from our `sigdelset(33)`, logged "select() failed in postmaster: Invalid argument" and shut
/// down).
#[must_use = "put errno back with ok() when the call succeeded"]
pub struct KeepErrno(libc::c_int);

impl KeepErrno {
    /// Remember the calling thread's `errno`.
    pub fn new() -> KeepErrno {
        // SAFETY: __errno_location returns the calling thread's errno, always valid.
        KeepErrno(unsafe { *libc::__errno_location() })
    }

    /// The call succeeded: put `errno` back, and return `r`.
    pub fn ok<T>(self, r: T) -> T {
        // SAFETY: as in `new`.
        unsafe { *libc::__errno_location() = self.0 };
        r
    }
}

impl Default for KeepErrno {
    fn default() -> Self {
        KeepErrno::new()
    }
}
