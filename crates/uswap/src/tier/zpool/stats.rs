//! The pool's counters as [`PoolStats`] (zswap's debug counters, zram's recompression ones).
//!
//! Locking: none (relaxed loads of atomics, each on its own: the counters are not one
//! consistent snapshot).

use super::ZPool;
use crate::sync::{AtomicU64, Ordering};

/// zswap-style debug counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Bytes of RAM the pool holds in zspages and large objects.
    pub pool_total_size: u64,
    /// Bytes of emptied zspages and large allocations kept for reuse (resident too).
    pub pool_spare_bytes: u64,
    /// 4 KiB pages of original data stored.
    pub stored_pages: u64,
    /// Pages stored raw because they did not compress.
    pub stored_incompressible_pages: u64,
    /// Stores refused by the size limit.
    pub pool_limit_hit: u64,
    /// Stores refused because they did not compress (policy `Reject`).
    pub reject_compress_poor: u64,
    /// Objects moved by compaction.
    pub compacted_objects: u64,
    /// Bytes released by compaction.
    pub pages_compacted_bytes: u64,
    /// Loads that failed to decompress.
    pub decompress_fail: u64,
    /// Objects re-encoded by `ZPool::recompress` and moved to a smaller size class (zram's
    /// `num_recompressed`, counted in objects; see `recompressed_pages`).
    pub num_recompressed: u64,
    /// 4 KiB pages of original data in those objects.
    pub recompressed_pages: u64,
    /// Objects recompression tried and left as they were: the secondary algorithm did not
    /// reach a smaller class (zram marks such slots `incompressible`), or the move was refused.
    pub recompress_kept: u64,
    /// Bytes of object slots given back by recompression (old class size minus new).
    pub recompress_saved_bytes: u64,
    /// Thread CPU time spent in recompression passes, ns.
    pub recompress_cpu_ns: u64,
}

impl ZPool {
    /// zswap-style counters.
    pub fn stats(&self) -> PoolStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PoolStats {
            pool_total_size: r(&self.total),
            pool_spare_bytes: r(&self.spare.bytes),
            stored_pages: r(&self.stored_pages),
            stored_incompressible_pages: r(&self.incompressible),
            pool_limit_hit: r(&self.limit_hit),
            reject_compress_poor: r(&self.poor),
            compacted_objects: r(&self.compacted_objs),
            pages_compacted_bytes: r(&self.compacted_bytes),
            decompress_fail: r(&self.decompress_fail),
            num_recompressed: r(&self.recomp.objects),
            recompressed_pages: r(&self.recomp.pages),
            recompress_kept: r(&self.recomp.kept),
            recompress_saved_bytes: r(&self.recomp.saved_bytes),
            recompress_cpu_ns: r(&self.recomp.cpu_ns),
        }
    }
}
