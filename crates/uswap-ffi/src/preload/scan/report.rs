//! The scan's part of the statistics: the memory outside the pager and the passes' counters,
//! as the `unmanaged` object of a statistics snapshot (written by
//! [`crate::preload::write_stats`]).
//!
//! Locking: none; it reads relaxed atomics of [`super::unmanaged`](mod@super::unmanaged), [`super::pass`] and
//! [`super::block`], and the pager's own-memory records (`uswap_pager::own`).

use super::block::SYNC;
use super::pass::PASSES;
use super::unmanaged::UNMANAGED;
use std::sync::atomic::Ordering;

/// The memory outside the pager, for the statistics.
pub fn unmanaged() -> uswap_pager::record::Unmanaged {
    uswap_pager::record::Unmanaged {
        anon_bytes_now: UNMANAGED.now.load(Ordering::Relaxed),
        anon_bytes_peak: UNMANAGED.peak.load(Ordering::Relaxed),
        anon_at_start_bytes: UNMANAGED.anon_at_start.load(Ordering::Relaxed),
        thread_stack_bytes: PASSES.stack_bytes.load(Ordering::Relaxed),
        small_or_exec_bytes: PASSES.skipped_bytes.load(Ordering::Relaxed),
        scan_passes: PASSES.passes.load(Ordering::Relaxed),
        scan_sync_passes: SYNC.passes.load(Ordering::Relaxed),
        scan_merged_with_own: PASSES.merged_with_own.load(Ordering::Relaxed),
        scan_unstable_passes: PASSES.unstable.load(Ordering::Relaxed),
        scan_adopted_bytes: PASSES.adopted_bytes.load(Ordering::Relaxed),
        loader_bytes: PASSES.loader_bytes.load(Ordering::Relaxed),
        own_overflow: uswap_pager::own::overflowed() as u64,
        own_entries_high: uswap_pager::own::recorded_high() as u64,
        scan_busy_retries: PASSES.busy_retries.load(Ordering::Relaxed),
        warned: UNMANAGED.warned.load(Ordering::Relaxed),
    }
}
