//! The cluster lock (the kernel's `ci->lock`): a mutex with a `try_lock` for list walkers.
//!
//! Normal builds wrap the `sync` shim's `Mutex`. Under `--cfg loom` the lock is a flag taken
//! by compare-exchange in front of the mutex: loom 0.7 marks a thread that is about to
//! `try_lock` a mutex as blocked when another thread takes that mutex first, which reports a
//! deadlock that cannot happen with a real `try_lock` (it returns at once). The flag gives the
//! model the real non-blocking semantics; the mutex behind it is then never contended.
//!
//! Locking: this is the cluster lock (`LockClass::Cluster`), the middle of the space's lock
//! order shard -> cluster -> list (`mod.rs`). A holder of the list lock only uses `try_lock`
//! (`relocate.rs`), which never waits.

use crate::sync::{lock, LockClass, Mutex, MutexGuard};
use std::ops::{Deref, DerefMut};

#[cfg(loom)]
use crate::sync::{AtomicBool, Ordering};

/// A mutex with lock and try_lock.
pub(super) struct ClusterLock<T> {
    m: Mutex<T>,
    #[cfg(loom)]
    held: AtomicBool,
}

/// A held [`ClusterLock`].
pub(super) struct ClusterLockGuard<'a, T> {
    g: MutexGuard<'a, T>,
    #[cfg(loom)]
    held: &'a AtomicBool,
}

impl<T> ClusterLock<T> {
    pub(super) fn new(v: T) -> Self {
        ClusterLock {
            m: Mutex::new(LockClass::Cluster, v),
            #[cfg(loom)]
            held: AtomicBool::new(false),
        }
    }

    /// Take the lock, waiting for it.
    pub(super) fn lock(&self) -> ClusterLockGuard<'_, T> {
        #[cfg(loom)]
        while self.held.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            loom::thread::yield_now();
        }
        ClusterLockGuard {
            g: lock(&self.m),
            #[cfg(loom)]
            held: &self.held,
        }
    }

    /// Take the lock if nobody holds it.
    pub(super) fn try_lock(&self) -> Option<ClusterLockGuard<'_, T>> {
        #[cfg(loom)]
        {
            if self.held.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
                return None;
            }
            Some(ClusterLockGuard { g: lock(&self.m), held: &self.held })
        }
        #[cfg(not(loom))]
        self.m.try_lock().map(|g| ClusterLockGuard { g })
    }
}

impl<T> Deref for ClusterLockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.g
    }
}

impl<T> DerefMut for ClusterLockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.g
    }
}

#[cfg(loom)]
impl<T> Drop for ClusterLockGuard<'_, T> {
    fn drop(&mut self) {
        // The mutex guard drops right after this; a thread that takes the flag meanwhile
        // waits on the (uncontended otherwise) mutex for that instant.
        self.held.store(false, Ordering::Release);
    }
}
