//! While the store fails: faults wait for room rather than grow past the limit, for a while.
//!
//! A folio whose store fails stays resident (never lost: reclaim undoes the eviction). The
//! engine has already passed a failing tier over for the next one and put what compresses
//! into the pool past its cap (`uswap::fails`); what is still refused (a full swap file and
//! data that does not compress, or RAM-only tiers with such data) cannot leave memory. Faults
//! that would map more over the limit then wait, as a program under a full memory cgroup
//! does, while the background reclaimer retries (every 20 ms, so room made by freeing disk
//! space is found). The wait is bounded: after [`crate::PagerConfig::full_wait_ms`] of
//! failing with the charge still over the limit, faults are mapped over it
//! (`limit_breaks`), since a program that waits for ever is hung; 0 waits for ever. The
//! episode ends at a store that succeeds once none has failed for [`QUIET_NS`]: stores that
//! fail and succeed by turns (data that compresses into the pool, data that does not) are one
//! episode, so the wait is bounded once for it, not once per success.
//!
//! Locking: none; one atomic word, written by whoever stores (reclaim on any thread) and read
//! by the fault path.

use std::sync::atomic::{AtomicU64, Ordering};

/// How long stores must go without a failure to end an episode.
pub(crate) const QUIET_NS: u64 = 1_000_000_000;

/// Whether the store is failing, and since when.
#[derive(Default)]
pub(crate) struct StoreHealth {
    /// Monotonic ns of the episode's first failure (0: the store works).
    failing_since: AtomicU64,
    /// Monotonic ns of the last failure.
    last_failure: AtomicU64,
}

impl StoreHealth {
    /// A store failed at `now`.
    pub(crate) fn failed(&self, now: u64) {
        self.last_failure.store(now, Ordering::Relaxed);
        let _ = self.failing_since.compare_exchange(0, now.max(1), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// A store succeeded at `now()` (on the reclaim path: one load in the common case; the
    /// clock is read only during an episode).
    #[inline]
    pub(crate) fn stored(&self, now: impl FnOnce() -> u64) {
        if self.failing_since.load(Ordering::Relaxed) != 0
            && now().saturating_sub(self.last_failure.load(Ordering::Relaxed)) >= QUIET_NS
        {
            self.failing_since.store(0, Ordering::Relaxed);
        }
    }

    /// True while the store fails.
    pub(crate) fn failing(&self) -> bool {
        self.failing_since.load(Ordering::Relaxed) != 0
    }

    /// True if a fault over the limit should wait at `now`: the store fails and has not
    /// failed for `wait_ms` yet (0: for ever).
    pub(crate) fn holds_faults(&self, now: u64, wait_ms: u64) -> bool {
        let s = self.failing_since.load(Ordering::Relaxed);
        s != 0 && (wait_ms == 0 || now.saturating_sub(s) < wait_ms.saturating_mul(1_000_000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_wait_while_the_store_fails_and_for_no_longer_than_the_bound() {
        let h = StoreHealth::default();
        assert!(!h.holds_faults(5, 100));
        h.failed(1_000_000_000);
        h.failed(1_050_000_000); // the episode began at the first failure
        assert!(h.failing());
        assert!(h.holds_faults(1_099_000_000, 100));
        assert!(!h.holds_faults(1_100_000_000, 100));
        assert!(h.holds_faults(u64::MAX, 0), "0 waits for ever");
        h.stored(|| 1_060_000_000);
        assert!(h.failing(), "a success right after a failure does not end the episode");
        h.stored(|| 1_050_000_000 + QUIET_NS);
        assert!(!h.failing() && !h.holds_faults(1_000_000_001, 100));
    }
}
