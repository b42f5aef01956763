//! Clusters of a swap space shared with other processes (a swap file a process tree shares
//! across `fork`).
//!
//! A `fork` child inherits a copy of its parent's space (tables, counts, lists) and the open
//! swap file, so both processes' tables name the same physical slots. Instead of counting
//! every slot's references across processes (the kernel's `swap_map` counts, which would need
//! a lock shared between processes), a space keeps *holds* per cluster through
//! [`ClusterHolds`]: a process holds a cluster while any table of it may name a slot of that
//! cluster, and slots are allocated only in a cluster the process holds alone. So:
//! - before a `fork`, [`SwapSpace::freeze_held`] puts every used cluster on the `shared` list
//!   (the parent's and, through the copy, the child's), where no allocator looks; each process
//!   frees its slots in it as before, and the data on disk stays as it was for the other;
//! - the cluster goes back to the allocator lists when the process that empties it is the last
//!   holder, or when [`SwapSpace::refresh_holds`] finds the process holds it alone again (the
//!   other process emptied it, exited or was killed);
//! - a free cluster is claimed when an allocation takes it ([`ClusterHolds::claim`]); one held
//!   elsewhere goes on the `foreign` list until its holders are gone.
//!
//! The cost is space: a slot freed in a frozen cluster is not reused until the cluster is
//! held alone again. Nothing is copied at `fork`, no lock is shared between processes (a holder
//! killed at any instant leaves no lock held; its holds are released by whoever finds it gone),
//! and nothing on the allocation path but the claim of a free cluster (one CAS) changes.
//!
//! Locking: [`ClusterHolds`] is lock-free (atomics in shared memory). The methods here take
//! the cluster lock, then the list lock (the allocator's order); candidates are collected under
//! the list lock and checked under each cluster's lock.

use super::state::{l_nonfull, ClusterFlag, ClusterState, L_FOREIGN, L_FREE, L_FULL, L_SHARED, N};
use super::SwapSpace;
use crate::sync::lock;

/// Holds of one process on the clusters of a space shared with other processes. Implemented
/// over shared memory by `tier::holds` for swap files; tests implement it over a model.
pub trait ClusterHolds: Send + Sync {
    /// Take a hold on cluster `ci` for an allocation in it: true if this process holds it
    /// already or nobody held it (it does now); false if another process holds it.
    fn claim(&self, ci: usize) -> bool;
    /// True if this process is the only holder of `ci`.
    fn sole(&self, ci: usize) -> bool;
    /// True if nobody holds `ci`.
    fn free(&self, ci: usize) -> bool;
    /// Give this process's hold on `ci` up (nothing if it held none).
    fn release(&self, ci: usize);
}

impl SwapSpace {
    /// Share this space with other processes through `holds` (before the first allocation;
    /// every cluster must be free).
    pub fn set_holds(&mut self, holds: std::sync::Arc<dyn ClusterHolds>) {
        debug_assert_eq!(self.used_slots(), 0);
        self.holds = Some(holds);
    }

    /// Clusters on the `shared` list (frozen: another process may still read them).
    pub(crate) fn shared_clusters(&self) -> usize {
        lock(&self.lists).len(L_SHARED)
    }

    /// Before a `fork` that shares the space: move every used cluster to the `shared` list, so
    /// neither process allocates in it while the other may still read its slots. Returns the
    /// number frozen. The caller makes sure no allocation is in flight (a cluster an allocator
    /// holds isolated would go back to an allocator list when it is done).
    pub fn freeze_held(&self) -> usize {
        let mut n = 0;
        for (ci, c) in self.clusters.iter().enumerate() {
            let mut st = c.state.lock();
            debug_assert!(st.flag != ClusterFlag::None, "freeze_held with an allocation in flight");
            if st.count > 0 && matches!(st.flag, ClusterFlag::Nonfull | ClusterFlag::Frag | ClusterFlag::Full) {
                st.bucket = 0;
                self.move_cluster(ci, &mut st, ClusterFlag::Shared, L_SHARED);
                n += 1;
            }
        }
        n
    }

    /// Give back to the allocator what the other processes gave up: a `shared` cluster this
    /// process now holds alone goes to `nonfull` (or `full`), a `foreign` cluster nobody holds
    /// any more goes to `free`. Returns (thawed, freed). Not on the fault path (it walks lists).
    pub fn refresh_holds(&self) -> (usize, usize) {
        let Some(h) = self.holds.as_deref() else { return (0, 0) };
        let (shared, foreign) = {
            let l = lock(&self.lists);
            (l.members(L_SHARED), l.members(L_FOREIGN))
        };
        let mut thawed = 0;
        for ci in shared {
            let mut st = self.cluster(ci).state.lock();
            if st.flag == ClusterFlag::Shared && h.sole(ci) {
                self.thaw(ci, &mut st);
                thawed += 1;
            }
        }
        let mut freed = 0;
        for ci in foreign {
            let mut st = self.cluster(ci).state.lock();
            if st.flag == ClusterFlag::Foreign && h.free(ci) {
                self.move_cluster(ci, &mut st, ClusterFlag::Free, L_FREE);
                freed += 1;
            }
        }
        (thawed, freed)
    }

    fn thaw(&self, ci: usize, st: &mut ClusterState) {
        if st.count as usize == N {
            self.move_cluster(ci, st, ClusterFlag::Full, L_FULL);
        } else {
            self.move_cluster(ci, st, ClusterFlag::Nonfull, l_nonfull(st.order));
        }
    }

    /// Claim an empty cluster for an allocation (cluster lock held): true in a space of our
    /// own or when the claim succeeds; otherwise the cluster goes to the `foreign` list.
    pub(super) fn claim(&self, ci: usize, st: &mut ClusterState) -> bool {
        let Some(h) = self.holds.as_deref() else { return true };
        if h.claim(ci) {
            return true;
        }
        self.move_cluster(ci, st, ClusterFlag::Foreign, L_FOREIGN);
        false
    }
}
