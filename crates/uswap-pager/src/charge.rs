//! The pager's charge and its limit: the resident page count (the pages' part of the charge;
//! the swap cache and the pool count their own), the limit in force and what it is made of (the
//! budget, the program's memory outside the pager), and the compressed pool's share of it.
//!
//! The fault path and reclaim move the resident count as they map and drop pages; the
//! embedder sets the budget and the memory outside (`Pager::set_limit`, `Pager::set_outside`,
//! which recompute the limit in force); the background reclaimer moves the pool's share
//! (`pool_share`). The arithmetic that joins them stays with the `Pager`, which also holds
//! the store and the reclaimer to tell.
//!
//! Locking: none. Every field is an atomic read and written on its own, or fixed at start-up;
//! the orderings are the callers' (acquire-release changes of the resident count, relaxed
//! loads and stores otherwise).

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64};

/// The charge's counts and the limits it is held to (the pager's `charge`).
pub(crate) struct Charge {
    /// Pages resident in the pager's regions (signed: readers take a negative value as zero).
    pub(crate) resident_pages: AtomicI64,
    /// The limit in force for the pager's charge: the budget less the memory outside the
    /// pager, at least a quarter of the budget (`Pager::set_limit`, `Pager::set_outside`).
    pub(crate) limit: AtomicU64,
    /// The budget (`Pager::set_limit`): `limit_bytes` of the configuration unless lowered, as
    /// a memory cgroup's `memory.max` can be written while it runs.
    pub(crate) budget: AtomicU64,
    /// The program's anonymous memory outside the pager (`Pager::set_outside`).
    pub(crate) outside: AtomicU64,
    /// The store keeps its RAM under the pool's share of the limit (see
    /// [`PageStore::limit_ram`](crate::PageStore::limit_ram)).
    pub(crate) pool_capped: bool,
    /// The pool's share of the limit in per mille (`pool_percent` at first; moved by the
    /// background reclaimer's `pool_share` with `pool_adapt`).
    pub(crate) pool_permille: AtomicU32,
}

impl Charge {
    /// Nothing resident, the limit and the budget at `limit_bytes`, nothing outside; the pool
    /// capped (`pool_capped`) at `pool_percent` of the limit.
    pub(crate) fn new(limit_bytes: u64, pool_capped: bool, pool_percent: u8) -> Charge {
        Charge {
            resident_pages: AtomicI64::new(0),
            limit: AtomicU64::new(limit_bytes),
            budget: AtomicU64::new(limit_bytes),
            outside: AtomicU64::new(0),
            pool_capped,
            pool_permille: AtomicU32::new(u32::from(pool_percent) * 10),
        }
    }
}
