//! A cluster's place on the allocator lists: taken off a list locked (the kernel's
//! `isolate_lock_cluster`), put back where its count says after an allocation or a free
//! (`relocate_cluster`, `free_cluster`), and the discard list's worker.
//!
//! Locking: a cluster moves with its lock held, the list lock taken inside (cluster -> list).
//! While holding the list lock a cluster lock is only *tried* (`isolate_lock`, the kernel's
//! `isolate_lock_cluster`); a flag changes only with both the cluster and the list lock held.
//! The discard hook runs with no lock held.

use super::frag::bucket_of;
use super::list::NIL;
use super::lock::ClusterLockGuard;
use super::state::{l_frag, l_nonfull, ClusterFlag, ClusterState, L_DISCARD, L_FREE, L_FULL, N, T_DISCARDING};
use super::{FragPolicy, SwapSpace};
use crate::sync::lock;

impl SwapSpace {
    /// `isolate_lock_cluster`: take the first cluster of `list` whose lock can be taken
    /// without waiting, off the list (flag NONE), locked.
    pub(super) fn isolate_lock(&self, list: u16) -> Option<(usize, ClusterLockGuard<'_, ClusterState>)> {
        self.isolate_lock_in(std::iter::once(list))
    }

    /// [`Self::isolate_lock`] over several lists in turn, under one hold of the list lock.
    pub(super) fn isolate_lock_in(
        &self,
        lists: impl Iterator<Item = u16>,
    ) -> Option<(usize, ClusterLockGuard<'_, ClusterState>)> {
        let mut l = lock(&self.lists);
        for list in lists {
            // Never-used clusters first, in order (the order of a free list on which every
            // cluster started, with the freed ones behind).
            let fresh = if list == L_FREE { self.ready_next_fresh(&mut l) } else { None };
            if let Some(fresh) = fresh {
                let c = self.clusters.get(fresh).expect("made ready");
                if let Some(mut st) = c.state.try_lock() {
                    l.remove(fresh as u32);
                    st.flag = ClusterFlag::None;
                    return Some((fresh, st));
                }
            }
            let mut c = l.first(list);
            while c != NIL {
                // A cluster on a list is ready (`get`, not `cluster`: the list lock is held).
                let cl = self.clusters.get(c as usize).expect("a cluster on a list is ready");
                if let Some(mut st) = cl.state.try_lock() {
                    debug_assert!(st.flag != ClusterFlag::None);
                    l.remove(c);
                    st.flag = ClusterFlag::None;
                    return Some((c as usize, st));
                }
                c = l.next_of(c);
            }
        }
        None
    }

    /// Put cluster `ci` at the tail of `list`, with `flag`. Cluster lock held (`st`).
    pub(super) fn move_cluster(&self, ci: usize, st: &mut ClusterState, flag: ClusterFlag, list: u16) {
        lock(&self.lists).move_tail(ci as u32, list);
        st.flag = flag;
    }

    /// `free_cluster`: an empty cluster goes to the discard list or the free list. In a shared
    /// space only the last holder discards (its hold is released once the hole is punched);
    /// any other releases its hold now.
    fn free_cluster(&self, ci: usize, st: &mut ClusterState) {
        debug_assert_eq!(st.count, 0);
        st.order = 0;
        st.bucket = 0;
        if let Some(h) = &self.holds {
            if !(self.cfg.discard && h.sole(ci)) {
                h.release(ci);
                self.move_cluster(ci, st, ClusterFlag::Free, L_FREE);
                return;
            }
        }
        if self.cfg.discard {
            self.move_cluster(ci, st, ClusterFlag::Discard, L_DISCARD);
        } else {
            self.move_cluster(ci, st, ClusterFlag::Free, L_FREE);
        }
    }

    /// `relocate_cluster`, after an allocation attempt: empty -> free, partial -> frag
    /// (its bucket), full -> full.
    pub(super) fn relocate_after_alloc(&self, ci: usize, st: &mut ClusterState) {
        if st.flag == ClusterFlag::Discard {
            return;
        }
        let count = st.count as usize;
        if count == 0 {
            if st.flag != ClusterFlag::Free {
                self.free_cluster(ci, st);
            }
        } else if count < N {
            let b = if self.cfg.frag_policy == FragPolicy::Buckets { bucket_of(st.count) } else { 0 };
            if st.flag != ClusterFlag::Frag || st.bucket != b {
                st.bucket = b;
                self.move_cluster(ci, st, ClusterFlag::Frag, l_frag(st.order, b));
            }
        } else if st.flag != ClusterFlag::Full {
            self.move_cluster(ci, st, ClusterFlag::Full, L_FULL);
        }
    }

    /// After slots were freed (`partial_free_cluster` / `free_cluster`).
    pub(super) fn relocate_after_free(&self, ci: usize, st: &mut ClusterState) {
        if st.count == 0 {
            if st.flag != ClusterFlag::Free && st.flag != ClusterFlag::Discard {
                self.free_cluster(ci, st);
            }
        } else if st.flag != ClusterFlag::Nonfull && st.flag != ClusterFlag::Shared {
            st.bucket = 0;
            self.move_cluster(ci, st, ClusterFlag::Nonfull, l_nonfull(st.order));
        }
    }

    /// Discard worker (`swap_do_scheduled_discard`): take each cluster off the discard list,
    /// call `discard(cluster_index)` with no lock held (the file tier punches a hole), then
    /// put it on the free list. Returns the number of clusters discarded.
    pub fn process_discards(&self, discard: &mut dyn FnMut(usize)) -> usize {
        let mut done = 0;
        loop {
            let ci = {
                let mut l = lock(&self.lists);
                let c = l.first(L_DISCARD);
                if c == NIL {
                    break;
                }
                l.tag(c, T_DISCARDING);
                c as usize
            };
            discard(ci);
            let mut st = self.cluster(ci).state.lock();
            debug_assert_eq!(st.flag, ClusterFlag::Discard);
            debug_assert_eq!(st.count, 0);
            if let Some(h) = &self.holds {
                h.release(ci);
            }
            self.move_cluster(ci, &mut st, ClusterFlag::Free, L_FREE);
            done += 1;
        }
        done
    }
}
