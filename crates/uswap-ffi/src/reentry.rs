//! Re-entry state: whether the calling thread is running uswap code.
//!
//! Interposed calls (`malloc`, `mmap`, `madvise`, `sigaction`…) made by uswap code itself must
//! pass straight to the system: the pager's threads, its fault handler and the fork handlers run
//! through [`internal`], and the interposers ask [`in_internal`]. A leaf module: it imports
//! nothing of the crate, so every layer above may use it.
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
