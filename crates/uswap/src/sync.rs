//! Synchronization shim: the one place that names atomics, locks and epoch reclamation.
//!
//! Normal builds use `std` and `crossbeam-epoch`. Under `--cfg loom` the atomics, mutexes and
//! threads come from loom so its model checker can explore every interleaving of the small
//! kernels (slot allocation, add-or-get against delete). Tables retired under loom are kept
//! until the owner drops (loom cannot see inside crossbeam-epoch); under a normal build they are
//! freed once no pinned reader can hold them.

#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(loom)]
pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Lock a mutex, ignoring poisoning: a panic in another thread already failed the test or
/// aborted the process, and the protected state is kept consistent step by step.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// A small stable per-thread index, used to pick a counter shard or an allocator shard
/// (the user-space stand-in for "the current CPU").
pub fn thread_shard() -> usize {
    use std::cell::Cell;
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SHARD.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        s.set(n);
        n
    })
}
