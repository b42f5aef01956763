//! The size limit: `max_bytes` with hysteresis like zswap's `max_pool_percent` and
//! `accept_threshold_percent`. Once a store would exceed the limit the pool is "full" and
//! rejects every store until its size falls below the accept threshold;
//! [`Backend::over_limit`](crate::backend::Backend::over_limit) says so, so the engine writes
//! back.
//!
//! Locking: none (relaxed atomics: the full flag, the size, the limit-hit counter).

use super::ZPool;
use crate::sync::Ordering;

impl ZPool {
    pub(super) fn accept_bytes(&self) -> u64 {
        (u128::from(self.cfg.max_bytes) * u128::from(self.cfg.accept_percent) / 100) as u64
    }

    /// Hysteresis: true while the pool refuses stores.
    pub(super) fn refusing(&self) -> bool {
        if self.cfg.max_bytes == 0 || !self.full.load(Ordering::Relaxed) {
            return false;
        }
        if self.total.load(Ordering::Relaxed) <= self.accept_bytes() {
            self.full.store(false, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Would adding `bytes` of RAM pass the limit? Sets the full flag if so.
    pub(super) fn would_overflow(&self, bytes: u64) -> bool {
        if self.cfg.max_bytes != 0 && self.total.load(Ordering::Relaxed) + bytes > self.cfg.max_bytes {
            self.full.store(true, Ordering::Relaxed);
            self.limit_hit.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }
}
