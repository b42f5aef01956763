//! Allocator statistics: per-order allocations, fallbacks and where allocations came from,
//! list lengths, and the fragment buckets.
//!
//! Locking: counted per allocator shard under the shard's lock (every allocation holds its
//! shard lock anyway); summed on read by [`SwapSpace::alloc_stats`], which takes each shard's
//! lock in turn, then the list lock for the lengths of the lists.

use super::frag::{bucket_prior, bucket_range, NR_BUCKETS};
use super::state::{l_frag, l_nonfull, L_DISCARD, L_FOREIGN, L_FREE, L_FULL, L_SHARED, N};
use super::{FragPolicy, SwapSpace};
use crate::swap_table::{MAX_ORDER, NR_ORDERS};
use crate::sync::lock;

/// Where an allocation was satisfied (kernel `cluster_alloc_swap_entry` steps).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(super) enum Source {
    /// The shard's current cluster for the order (`swap_alloc_fast`).
    Fast = 0,
    /// `nonfull_clusters[order]`.
    Nonfull = 1,
    /// `free_clusters`.
    Free = 2,
    /// `frag_clusters[order]` under the fragment policy.
    Frag = 3,
    /// Order 0 stealing from frag/nonfull clusters of any order.
    Steal = 4,
}

/// One shard's counters.
#[derive(Clone, Default)]
pub(super) struct ShardStats {
    pub(super) alloc: [u64; NR_ORDERS],
    pub(super) fail: [u64; NR_ORDERS],
    pub(super) src: [[u64; NR_ORDERS]; 5],
    pub(super) bucket_scans: [[u64; NR_BUCKETS]; NR_ORDERS],
    pub(super) bucket_hits: [[u64; NR_BUCKETS]; NR_ORDERS],
    pub(super) frag_scans: [u64; NR_ORDERS],
}

impl ShardStats {
    pub(super) fn add(&self, to: &mut AllocStats) {
        for o in 0..NR_ORDERS {
            to.alloc[o] += self.alloc[o];
            to.fallback[o] += self.fail[o];
            to.from_fast[o] += self.src[Source::Fast as usize][o];
            to.from_nonfull[o] += self.src[Source::Nonfull as usize][o];
            to.from_free[o] += self.src[Source::Free as usize][o];
            to.from_frag[o] += self.src[Source::Frag as usize][o];
            to.from_steal[o] += self.src[Source::Steal as usize][o];
            to.frag_scans[o] += self.frag_scans[o];
        }
    }
}

/// Statistics of one fragment bucket of one order.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct BucketStats {
    /// Folio order of the clusters in the bucket.
    pub order: u8,
    /// Bucket index (0 = freest).
    pub bucket: u8,
    /// Used-count range `[min_used, max_used)` of the bucket.
    pub min_used: u16,
    /// End of the used-count range (exclusive).
    pub max_used: u16,
    /// Clusters in the bucket now.
    pub clusters: usize,
    /// Clusters scanned from this bucket by allocations of this order.
    pub scans: u64,
    /// Scans that found a window.
    pub hits: u64,
    /// The model's success probability P(order, middle of the range) (`Buckets` only).
    pub p_model: Option<f64>,
}

/// A snapshot of the allocator's counters and lists.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct AllocStats {
    /// Fragment policy of the space.
    pub policy: FragPolicy,
    /// Successful allocations per order.
    pub alloc: [u64; NR_ORDERS],
    /// Failed allocations per order (`swpout_fallback` when the caller splits).
    pub fallback: [u64; NR_ORDERS],
    /// Allocations from the shard's current cluster.
    pub from_fast: [u64; NR_ORDERS],
    /// Allocations from `nonfull[order]`.
    pub from_nonfull: [u64; NR_ORDERS],
    /// Allocations from a free cluster.
    pub from_free: [u64; NR_ORDERS],
    /// Allocations from `frag[order]`.
    pub from_frag: [u64; NR_ORDERS],
    /// Order-0 allocations stolen from clusters of other orders.
    pub from_steal: [u64; NR_ORDERS],
    /// Clusters scanned in the frag step, per order.
    pub frag_scans: [u64; NR_ORDERS],
    /// Clusters on the free list.
    pub free_clusters: usize,
    /// Clusters on `nonfull[order]`.
    pub nonfull_clusters: [usize; NR_ORDERS],
    /// Clusters on `frag[order]` (all buckets).
    pub frag_clusters: [usize; NR_ORDERS],
    /// Clusters on the full list.
    pub full_clusters: usize,
    /// Clusters waiting for discard.
    pub discard_clusters: usize,
    /// Clusters frozen because another process holds them too (`fork` shared the file).
    pub shared_clusters: usize,
    /// Free clusters another process sharing the file holds.
    pub foreign_clusters: usize,
    /// Per (order, bucket) frag statistics for orders 0..=8 (`ScanOne` has one bucket).
    pub buckets: Vec<BucketStats>,
}

impl AllocStats {
    /// Failed / attempted allocations of `order` (0 when none was attempted).
    pub fn fallback_rate(&self, order: usize) -> f64 {
        let tries = self.alloc[order] + self.fallback[order];
        if tries == 0 {
            0.0
        } else {
            self.fallback[order] as f64 / tries as f64
        }
    }
}

impl SwapSpace {
    /// A snapshot of the allocator statistics.
    pub fn alloc_stats(&self) -> AllocStats {
        let mut s = AllocStats { policy: self.cfg.frag_policy, ..AllocStats::default() };
        let mut scans = [[0u64; NR_BUCKETS]; NR_ORDERS];
        let mut hits = [[0u64; NR_BUCKETS]; NR_ORDERS];
        for sh in self.shards.iter() {
            let sh = lock(sh);
            sh.stats.add(&mut s);
            for o in 0..NR_ORDERS {
                for b in 0..NR_BUCKETS {
                    scans[o][b] += sh.stats.bucket_scans[o][b];
                    hits[o][b] += sh.stats.bucket_hits[o][b];
                }
            }
        }
        let l = lock(&self.lists);
        s.free_clusters = l.len(L_FREE) + (self.clusters.len() - self.clusters.ready());
        s.full_clusters = l.len(L_FULL);
        s.discard_clusters = l.len(L_DISCARD);
        s.shared_clusters = l.len(L_SHARED);
        s.foreign_clusters = l.len(L_FOREIGN);
        for o in 0..NR_ORDERS as u8 {
            s.nonfull_clusters[o as usize] = l.len(l_nonfull(o));
            s.frag_clusters[o as usize] = (0..NR_BUCKETS as u8).map(|b| l.len(l_frag(o, b))).sum();
        }
        for o in 0..MAX_ORDER {
            for b in 0..self.nr_buckets() as u8 {
                let (lo, hi, p) = match self.cfg.frag_policy {
                    FragPolicy::Buckets => {
                        let (lo, hi) = bucket_range(b);
                        (lo, hi.min(N as u16), Some(bucket_prior(o, b)))
                    }
                    FragPolicy::ScanOne => (0, N as u16, None),
                };
                s.buckets.push(BucketStats {
                    order: o,
                    bucket: b,
                    min_used: lo,
                    max_used: hi,
                    clusters: l.len(l_frag(o, b)),
                    scans: scans[o as usize][b as usize],
                    hits: hits[o as usize][b as usize],
                    p_model: p,
                });
            }
        }
        s
    }
}
