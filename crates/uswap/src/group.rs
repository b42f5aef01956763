//! Groups: the memory-cgroup analogue every swap entry is charged to.
//!
//! A group is a small integer (the 12-bit GROUP field of the table word, see
//! `docs/design.md`). Each group has three counters and two limits:
//!
//! - `swapped_pages`: pages of this group held by the engine in any form (zero, pool, file,
//!   resident in the swap cache). Informational, like `memory.swap.current` before virtual swap.
//! - `pool_bytes`: bytes the group's pages take in RAM-backed tiers (pool and memory kinds).
//!   The pager's resident limit includes them (the `memory.zswap.current` analogue); limited by
//!   `pool_max` (`memory.zswap.max`).
//! - `swap_pages`: physical swap pages, i.e. pages whose data sits in a [`TierKind::File`]
//!   tier. Charged only when data lands on a file tier (at store or at writeback time) and
//!   uncharged when it leaves it, as in the kernel patch "memcg: swap: only charge physical
//!   swap slots". Limited by `swap_max` (`memory.swap.max`). Zero and pool pages are never
//!   charged here.
//!
//! Locking: none. Every counter is an atomic; a limit check and its charge are one
//! compare-and-swap loop, so two threads cannot both pass a limit that only one fits under.
//! Counters are not cache-padded per group: groups are many and the fault path touches one.
//!
//! [`TierKind::File`]: crate::backend::TierKind::File

use crate::error::SwapError;
use crate::swap_table::GROUP_MAX;
use crate::sync::{AtomicU64, Ordering};

/// "No limit".
pub(crate) const UNLIMITED: u64 = u64::MAX;

/// Counters and limits of one group.
#[derive(Default)]
struct Group {
    swapped_pages: AtomicU64,
    pool_bytes: AtomicU64,
    swap_pages: AtomicU64,
    /// `UNLIMITED - swap_max` so that a zeroed group is unlimited.
    swap_max_inv: AtomicU64,
    /// `UNLIMITED - pool_max`.
    pool_max_inv: AtomicU64,
}

/// A snapshot of one group's counters and limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct GroupUsage {
    /// Pages held by the engine in any form.
    pub swapped_pages: u64,
    /// Bytes in RAM-backed tiers (pool, memory).
    pub pool_bytes: u64,
    /// Physical swap pages (file tiers).
    pub swap_pages: u64,
    /// Limit on `swap_pages` (`UNLIMITED` if none).
    pub swap_max: u64,
    /// Limit on `pool_bytes` (`UNLIMITED` if none).
    pub pool_max: u64,
}

/// All groups of an engine.
pub struct Groups {
    groups: Box<[Group]>,
}

fn charge(counter: &AtomicU64, n: u64, max: u64) -> bool {
    let mut cur = counter.load(Ordering::Relaxed);
    loop {
        let Some(new) = cur.checked_add(n) else { return false };
        if new > max {
            return false;
        }
        match counter.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(v) => cur = v,
        }
    }
}

fn uncharge(counter: &AtomicU64, n: u64) {
    // Saturating: an uncharge never wraps even if a caller's accounting is off.
    let mut cur = counter.load(Ordering::Relaxed);
    loop {
        let new = cur.saturating_sub(n);
        match counter.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(v) => cur = v,
        }
    }
}

impl Groups {
    /// `nr` groups with ids `0..nr` (at most `GROUP_MAX + 1`), all unlimited.
    pub(crate) fn new(nr: usize) -> Result<Self, SwapError> {
        if nr == 0 || nr > usize::from(GROUP_MAX) + 1 {
            return Err(SwapError::Config(format!("number of groups must be 1..={}", usize::from(GROUP_MAX) + 1)));
        }
        Ok(Groups { groups: (0..nr).map(|_| Group::default()).collect() })
    }

    fn get(&self, g: u16) -> Result<&Group, SwapError> {
        self.groups.get(usize::from(g)).ok_or_else(|| SwapError::Config(format!("no group {g}")))
    }

    /// Check that `g` names a group.
    pub(crate) fn check(&self, g: u16) -> Result<(), SwapError> {
        self.get(g).map(|_| ())
    }

    /// Set the physical swap limit in pages (`memory.swap.max`).
    pub fn set_swap_max(&self, g: u16, pages: u64) -> Result<(), SwapError> {
        self.get(g)?.swap_max_inv.store(UNLIMITED - pages, Ordering::Relaxed);
        Ok(())
    }

    /// Set the RAM-tier limit in bytes (`memory.zswap.max`).
    pub fn set_pool_max(&self, g: u16, bytes: u64) -> Result<(), SwapError> {
        self.get(g)?.pool_max_inv.store(UNLIMITED - bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Counters and limits of `g`.
    pub fn usage(&self, g: u16) -> Result<GroupUsage, SwapError> {
        let x = self.get(g)?;
        Ok(GroupUsage {
            swapped_pages: x.swapped_pages.load(Ordering::Relaxed),
            pool_bytes: x.pool_bytes.load(Ordering::Relaxed),
            swap_pages: x.swap_pages.load(Ordering::Relaxed),
            swap_max: UNLIMITED - x.swap_max_inv.load(Ordering::Relaxed),
            pool_max: UNLIMITED - x.pool_max_inv.load(Ordering::Relaxed),
        })
    }

    /// Charge `pages` physical swap pages; false (nothing charged) if that would pass `swap_max`.
    pub(crate) fn try_charge_swap(&self, g: u16, pages: u64) -> bool {
        match self.get(g) {
            Ok(x) => charge(&x.swap_pages, pages, UNLIMITED - x.swap_max_inv.load(Ordering::Relaxed)),
            Err(_) => false,
        }
    }

    /// Uncharge physical swap pages.
    pub(crate) fn uncharge_swap(&self, g: u16, pages: u64) {
        if let Ok(x) = self.get(g) {
            uncharge(&x.swap_pages, pages);
        }
    }

    /// True if the group may put more data into RAM tiers (below `pool_max`).
    pub(crate) fn may_pool(&self, g: u16) -> bool {
        match self.get(g) {
            Ok(x) => x.pool_bytes.load(Ordering::Relaxed) < UNLIMITED - x.pool_max_inv.load(Ordering::Relaxed),
            Err(_) => false,
        }
    }

    /// Charge RAM-tier bytes (after a store: the size is only known then, as with
    /// `obj_cgroup_charge_zswap`, so this may overshoot `pool_max` by one object).
    pub(crate) fn charge_pool(&self, g: u16, bytes: u64) {
        if let Ok(x) = self.get(g) {
            x.pool_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// Uncharge RAM-tier bytes.
    pub(crate) fn uncharge_pool(&self, g: u16, bytes: u64) {
        if let Ok(x) = self.get(g) {
            uncharge(&x.pool_bytes, bytes);
        }
    }

    /// Count pages the engine now holds for `g`.
    pub(crate) fn add_swapped(&self, g: u16, pages: u64) {
        if let Ok(x) = self.get(g) {
            x.swapped_pages.fetch_add(pages, Ordering::Relaxed);
        }
    }

    /// Count pages the engine no longer holds for `g`.
    pub(crate) fn sub_swapped(&self, g: u16, pages: u64) {
        if let Ok(x) = self.get(g) {
            uncharge(&x.swapped_pages, pages);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn swap_limit_is_enforced_and_uncharge_saturates() {
        let g = Groups::new(4).unwrap();
        assert!(Groups::new(0).is_err());
        assert!(Groups::new(4097).is_err());
        g.set_swap_max(1, 10).unwrap();
        assert!(g.try_charge_swap(1, 8));
        assert!(!g.try_charge_swap(1, 3));
        assert!(g.try_charge_swap(1, 2));
        assert!(!g.try_charge_swap(1, 1));
        g.uncharge_swap(1, 100);
        assert_eq!(g.usage(1).unwrap().swap_pages, 0);
        assert!(g.try_charge_swap(2, u64::MAX - 1));
        assert!(!g.try_charge_swap(2, 2));
        assert!(!g.try_charge_swap(9, 1));
        assert!(g.usage(9).is_err());
        assert_eq!(g.usage(0).unwrap().swap_max, UNLIMITED);
    }

    #[test]
    fn pool_limit() {
        let g = Groups::new(2).unwrap();
        g.set_pool_max(0, 100).unwrap();
        assert!(g.may_pool(0));
        g.charge_pool(0, 100);
        assert!(!g.may_pool(0));
        g.uncharge_pool(0, 1);
        assert!(g.may_pool(0));
        assert_eq!(g.usage(0).unwrap().pool_bytes, 99);
    }
}
