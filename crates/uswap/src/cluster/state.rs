//! One cluster: its state under its lock (`ClusterState`: used count, order, flag, frag
//! bucket, the bitmap of used slots, the extend table of saturated counts) and its table
//! pointer; the ids of the allocator lists that a cluster's flag names; the bitmap's window
//! search.
//!
//! Locking: none taken here. A `ClusterState` lives under its cluster's lock
//! (`Cluster::state`); `Cluster::table` is written under that lock and read lock-free
//! (`table.rs`).

use super::frag::NR_BUCKETS;
use super::lock::ClusterLock;
use crate::swap_table::{SwapTable, NR_ORDERS, SLOTS_PER_CLUSTER};
use crate::sync::AtomicPtr;

/// Slots per cluster.
pub(super) const N: usize = SLOTS_PER_CLUSTER;

/// The state of a cluster, the list it is on (kernel `enum swap_cluster_flags`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[repr(u8)]
pub(crate) enum ClusterFlag {
    /// Off every list: isolated by an allocator that holds its lock.
    None,
    /// On the free list (no used slot, no table).
    Free,
    /// On `nonfull[order]`.
    Nonfull,
    /// On `frag[order]` (bucket by used count under `Buckets`).
    Frag,
    /// On the full list.
    Full,
    /// On the shared list: used, and held by another process too since a `fork`, so no slot
    /// of it is allocated until this process holds it alone again (`share.rs`).
    Shared,
    /// On the foreign list: free here, but held by another process sharing the file.
    Foreign,
    /// On the discard list or being discarded.
    Discard,
}

/// Per-cluster state, under the cluster lock.
pub(super) struct ClusterState {
    /// Used slots (kernel `ci->count`).
    pub(super) count: u16,
    /// Order the cluster serves (kernel `ci->order`), 0 when free.
    pub(super) order: u8,
    /// The list the cluster is on.
    pub(super) flag: ClusterFlag,
    /// Frag bucket while `flag == Frag` (always 0 under `ScanOne`).
    pub(super) bucket: u8,
    /// Slots whose inline count is saturated (their count is in `extend`).
    pub(super) extend_used: u16,
    /// One bit per used slot: window searches without touching the table.
    pub(super) used: [u64; N / 64],
    /// Full counts of saturated slots, allocated on first overflow.
    pub(super) extend: Option<Box<[u32; N]>>,
}

/// One cluster: its state behind its lock, and its table.
pub(super) struct Cluster {
    pub(super) state: ClusterLock<ClusterState>,
    /// The table, null while the cluster has no used slot. Written under `state`.
    pub(super) table: AtomicPtr<SwapTable>,
}

impl Cluster {
    /// A free cluster with no table.
    pub(super) fn new() -> Self {
        Cluster {
            state: ClusterLock::new(ClusterState {
                count: 0,
                order: 0,
                flag: ClusterFlag::Free,
                bucket: 0,
                extend_used: 0,
                used: [0; N / 64],
                extend: None,
            }),
            table: AtomicPtr::new(std::ptr::null_mut()),
        }
    }
}

// List ids: the free, full, discard, shared and foreign lists, then `nonfull[order]`, then
// `frag[order][bucket]`.
pub(super) const L_FREE: u16 = 0;
pub(super) const L_FULL: u16 = 1;
pub(super) const L_DISCARD: u16 = 2;
pub(super) const L_SHARED: u16 = 3;
pub(super) const L_FOREIGN: u16 = 4;
const L_NONFULL0: u16 = 5;
const L_FRAG0: u16 = L_NONFULL0 + NR_ORDERS as u16;
pub(super) const NR_LISTS: usize = L_FRAG0 as usize + NR_ORDERS * NR_BUCKETS;
/// Tag of a cluster taken off the discard list by `process_discards`.
pub(super) const T_DISCARDING: u16 = NR_LISTS as u16;

/// The id of `nonfull[order]`.
#[inline]
pub(super) fn l_nonfull(order: u8) -> u16 {
    L_NONFULL0 + order as u16
}
/// The id of `frag[order]`, bucket `bucket`.
#[inline]
pub(super) fn l_frag(order: u8, bucket: u8) -> u16 {
    L_FRAG0 + (order as usize * NR_BUCKETS + bucket as usize) as u16
}

/// Whether slot `off` is used.
#[inline]
pub(super) fn bit(used: &[u64; N / 64], off: usize) -> bool {
    used[off / 64] >> (off % 64) & 1 != 0
}

/// True when the `n` slots from `off` are all free. `n` is a power of two and `off` is
/// aligned to it, so a window never straddles two bitmap words unless it covers whole words.
#[inline]
pub(super) fn window_free(used: &[u64; N / 64], off: usize, n: usize) -> bool {
    if n >= 64 {
        used[off / 64..(off + n) / 64].iter().all(|&w| w == 0)
    } else {
        let mask = ((1u64 << n) - 1) << (off % 64);
        used[off / 64] & mask == 0
    }
}

/// Mark the `n` slots from `off` used (`on`) or free.
pub(super) fn set_bits(used: &mut [u64; N / 64], off: usize, n: usize, on: bool) {
    for i in off..off + n {
        if on {
            used[i / 64] |= 1 << (i % 64);
        } else {
            used[i / 64] &= !(1 << (i % 64));
        }
    }
}

/// `cluster_is_usable()`: on an allocatable list (or isolated), and free or serving `order`
/// (order 0 may use any usable cluster).
#[inline]
pub(super) fn usable(st: &ClusterState, order: u8) -> bool {
    st.flag <= ClusterFlag::Frag && (order == 0 || st.count == 0 || st.order == order)
}
