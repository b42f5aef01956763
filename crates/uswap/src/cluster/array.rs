//! The space's cluster descriptors ([`ClusterArray`]), made ready in order as the allocator
//! first needs them.
//!
//! A space is sized for the most it may ever hold: the virtual swap space of every `uswap run`
//! process has 16 M slots, 32 768 clusters of about 100 bytes each, 3.4 MiB. A process uses a
//! few of them. So the array is allocated uninitialized (the allocator maps it and the kernel
//! commits a page only when it is first written), and only clusters `0..ready` are
//! initialized: the allocator makes the next one ready when it wants a free cluster
//! (`SwapSpace::isolate_lock_in`: never-used clusters first, in order, as when every cluster
//! started on the free list). Written whole at start, the array would be most of the anonymous
//! memory of a small program under `uswap run`, paid again by every process of a pipeline.
//!
//! Locking: clusters are made ready only under the space's list lock (one writer at a time);
//! `ready` is published with Release after the clusters below it are written, and a reader
//! that loads it with Acquire may use every cluster below it. A ready cluster stays ready
//! until the array drops.

use super::list::Lists;
use super::state::Cluster;
use crate::sync::{AtomicUsize, Ordering};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;

/// Cluster descriptors, the first `ready` of them initialized.
pub(super) struct ClusterArray {
    slots: Box<[MaybeUninit<UnsafeCell<Cluster>>]>,
    ready: AtomicUsize,
}

// SAFETY: a slot is written once, by the one thread making it ready (under the list lock),
// before `ready` covers it, and afterwards only shared as `&Cluster`, whose fields synchronize
// themselves (a lock and an atomic); so sharing the array shares `&Cluster`s, and Cluster is
// Sync.
unsafe impl Sync for ClusterArray {}
// SAFETY: the array owns its clusters, which are Send.
unsafe impl Send for ClusterArray {}

impl ClusterArray {
    /// Room for `n` clusters, none ready. Writes nothing into the room.
    pub(super) fn new(n: usize) -> Self {
        ClusterArray { slots: Box::new_uninit_slice(n), ready: AtomicUsize::new(0) }
    }

    /// Clusters the array has room for.
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Clusters ready (`0..ready()`).
    pub(super) fn ready(&self) -> usize {
        self.ready.load(Ordering::Acquire)
    }

    /// Cluster `ci`, if it is ready.
    #[inline]
    pub(super) fn get(&self, ci: usize) -> Option<&Cluster> {
        if ci < self.ready.load(Ordering::Acquire) {
            // SAFETY: clusters below `ready` were initialized before `ready` was published
            // (Release in `make_ready`, Acquire above), and no `&mut` to one is ever made.
            Some(unsafe { &*UnsafeCell::raw_get(self.slots[ci].as_ptr()) })
        } else {
            None
        }
    }

    /// The ready clusters, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Cluster> {
        (0..self.ready()).filter_map(|ci| self.get(ci))
    }

    /// Make clusters `ready()..to` ready, each initialized to `init()` and then passed to
    /// `put(lists, ci)` (which puts it on a list). `to` is at most [`ClusterArray::len`].
    ///
    /// # Safety
    /// - `lists` is the content of the list lock of the space that owns this array, held by
    ///   the caller: that lock is what makes the caller the only writer.
    pub(super) unsafe fn make_ready(
        &self,
        lists: &mut Lists,
        to: usize,
        init: impl Fn() -> Cluster,
        mut put: impl FnMut(&mut Lists, usize),
    ) {
        let from = self.ready.load(Ordering::Relaxed);
        let to = to.min(self.slots.len());
        for ci in from..to {
            // SAFETY: `ci >= ready`, so no reader uses this slot yet, and the caller's list
            // lock makes this the only writer; the slot is written once.
            unsafe { UnsafeCell::raw_get(self.slots[ci].as_ptr()).write(init()) };
            put(lists, ci);
        }
        if to > from {
            self.ready.store(to, Ordering::Release);
        }
    }
}

impl Drop for ClusterArray {
    fn drop(&mut self) {
        let ready = self.ready.load(Ordering::Relaxed);
        for slot in &mut self.slots[..ready] {
            // SAFETY: the first `ready` slots are initialized, `&mut self` means no one uses
            // them any more, and each is dropped once.
            unsafe { slot.assume_init_drop() };
        }
    }
}
