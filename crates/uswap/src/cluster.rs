//! Cluster allocator and per-cluster tables (OWNER: allocator helper; see docs/design.md).
//!
//! CONTRACT (to be replaced by the real module doc):
//! - `SwapSpace::new(SpaceConfig)`; `alloc(order, init) -> Result<SwapEntry, SwapError>`
//!   allocating 2^order naturally aligned free slots in one cluster and writing `init(i)` to
//!   slot i under the cluster lock; `load(entry) -> Result<Word, SwapError>` lock-free;
//!   `lock_cluster(entry) -> Result<ClusterGuard, SwapError>` for every change of a word.
//! - `ClusterGuard`: `word(off)`, `set(off, word)`, `count(off) -> u32` (with extend table),
//!   `set_count(off, n)`, `free_range(off, n)` (words to 0; list relocation and table free
//!   when the guard drops).

use crate::swap_table::{SwapEntry, Word};
use crate::SwapError;

/// How fragment clusters are searched.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default, serde::Serialize)]
pub enum FragPolicy {
    /// The kernel's (v6.18) policy: try one cluster from frag[order] per allocation.
    #[default]
    ScanOne,
    /// Chris Li's proposal: frag clusters bucketed by how free they are.
    Buckets,
}

/// Configuration of a swap space.
#[derive(Clone, Debug)]
pub struct SpaceConfig {
    /// Number of slots (rounded up to whole clusters).
    pub nr_slots: u64,
    /// Fragment policy.
    pub frag_policy: FragPolicy,
    /// Whether freed clusters go through the discard list before reuse.
    pub discard: bool,
}

/// A swap space: clusters, their tables and the allocator lists.
pub struct SwapSpace {
    _cfg: SpaceConfig,
}

/// A locked cluster.
pub struct ClusterGuard<'a> {
    _space: &'a SwapSpace,
}

impl SwapSpace {
    /// Create a space.
    pub fn new(cfg: SpaceConfig) -> Result<Self, SwapError> {
        Ok(SwapSpace { _cfg: cfg })
    }
    /// Allocate 2^order aligned slots.
    pub fn alloc(&self, order: u8, _init: &mut dyn FnMut(usize) -> Word) -> Result<SwapEntry, SwapError> {
        Err(SwapError::NoSpace { order })
    }
    /// Lock-free read of a slot's word.
    pub fn load(&self, e: SwapEntry) -> Result<Word, SwapError> {
        Err(SwapError::OutOfRange(e.0))
    }
    /// Lock the cluster holding `e`.
    pub fn lock_cluster(&self, e: SwapEntry) -> Result<ClusterGuard<'_>, SwapError> {
        let _ = ClusterGuard { _space: self };
        Err(SwapError::OutOfRange(e.0))
    }
}
