//! Pager statistics: fault counts by kind, reclaim counters, per-order swap counters under the
//! kernel's names (`swpout`, `swpout_fallback`, `swpin`, `swpin_fallback`, `swap_ra`,
//! `swap_ra_hit`) and a fault-latency histogram.
//!
//! Locking: none. Counters are relaxed atomics bumped from the fault path (signal-safe); the
//! latency histogram is a fixed array of atomic buckets (4 per power of two of nanoseconds),
//! so recording allocates nothing. A snapshot sums them; it may miss adds in flight.

use crate::Pager;
use std::sync::atomic::{AtomicU64, Ordering};
use uswap::MAX_ORDER;

const NR_ORDERS: usize = MAX_ORDER as usize + 1;
const HIST: usize = 64 * 4;

/// Live counters (fault path). Only `AtomicU64`s and arrays of them ([`Counters::reset`] and
/// `Default` rely on it).
#[repr(C)]
pub(crate) struct Counters {
    pub(crate) faults: AtomicU64,
    pub(crate) fault_zero: AtomicU64,
    pub(crate) fault_swapin: AtomicU64,
    pub(crate) fault_cache: AtomicU64,
    pub(crate) fault_wp: AtomicU64,
    pub(crate) fault_spurious: AtomicU64,
    pub(crate) fault_waits: AtomicU64,
    pub(crate) fault_held_ns: AtomicU64,
    pub(crate) reclaim_handed_back: AtomicU64,
    pub(crate) fault_throttled: AtomicU64,
    pub(crate) alloc_throttled: AtomicU64,
    pub(crate) fault_unowned: AtomicU64,
    pub(crate) adopted_pages: AtomicU64,
    pub(crate) adopted_regions: AtomicU64,
    pub(crate) retired_regions: AtomicU64,
    pub(crate) remap_moved_pages: AtomicU64,
    pub(crate) ev_deferred: AtomicU64,
    pub(crate) reclaim_aborted: AtomicU64,
    pub(crate) reclaim_cow_skipped: AtomicU64,
    pub(crate) reclaim_pinned_skipped: AtomicU64,
    pub(crate) pages_mapped: AtomicU64,
    pub(crate) demoted_pages: AtomicU64,
    pub(crate) workingset_activate: AtomicU64,
    pub(crate) pgdeactivate: AtomicU64,
    pub(crate) evicted_pages: AtomicU64,
    pub(crate) evicted_folios: AtomicU64,
    pub(crate) reclaim_batches: AtomicU64,
    pub(crate) reclaim_fail: AtomicU64,
    pub(crate) pool_share_moves: AtomicU64,
    pub(crate) madvise_calls: AtomicU64,
    pub(crate) wp_calls: AtomicU64,
    pub(crate) swap_ra: AtomicU64,
    pub(crate) swap_ra_hit: AtomicU64,
    pub(crate) swpout: [AtomicU64; NR_ORDERS],
    pub(crate) swpout_fallback: [AtomicU64; NR_ORDERS],
    pub(crate) swpin: [AtomicU64; NR_ORDERS],
    pub(crate) swpin_fallback: [AtomicU64; NR_ORDERS],
    pub(crate) ev_unmap: AtomicU64,
    pub(crate) ev_remap: AtomicU64,
    pub(crate) ev_remove: AtomicU64,
    pub(crate) ev_fork: AtomicU64,
    pub(crate) fork_hold_forced: AtomicU64,
    pub(crate) fork_child_faults: AtomicU64,
    pub(crate) efault_retries: AtomicU64,
    pub(crate) store_errors: AtomicU64,
    pub(crate) limit_breaks: AtomicU64,
    pub(crate) clean_kept: AtomicU64,
    pub(crate) clean_dirtied: AtomicU64,
    pub(crate) clean_evicted: AtomicU64,
    pub(crate) clean_discarded: AtomicU64,
    pub(crate) recomp_passes: AtomicU64,
    pub(crate) recomp_deferred: AtomicU64,
    pub(crate) recomp_objects: AtomicU64,
    pub(crate) recomp_pages: AtomicU64,
    pub(crate) recomp_kept: AtomicU64,
    pub(crate) recomp_saved_bytes: AtomicU64,
    pub(crate) recomp_compacted_bytes: AtomicU64,
    pub(crate) recomp_cpu_ns: AtomicU64,
    hist: [AtomicU64; HIST],
}

impl Default for Counters {
    fn default() -> Self {
        // SAFETY: every field is an AtomicU64 (or an array of them), for which all-zero is a
        // valid initial value.
        unsafe { std::mem::zeroed() }
    }
}

impl Counters {
    /// Set every counter to zero (in a `fork` child: its statistics are its own from the fork
    /// on, so that a tree's sum counts each event once).
    pub(crate) fn reset(&self) {
        self.all().iter().for_each(|c| c.store(0, Ordering::Relaxed));
    }

    /// Every counter and histogram bucket, in one slice.
    fn all(&self) -> &[AtomicU64] {
        // SAFETY: `Counters` is `repr(C)` and holds only `AtomicU64`s and arrays of them, so it
        // is exactly `size_of::<Counters>() / 8` `AtomicU64`s in a row, aligned as one; the
        // slice borrows `self` and is only used through the atomics' own methods.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const Counters).cast::<AtomicU64>(),
                std::mem::size_of::<Counters>() / std::mem::size_of::<AtomicU64>(),
            )
        }
    }
}

#[inline]
pub(crate) fn inc(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Monotonic nanoseconds: the engine's clock, so that its swap-in times and ours agree.
pub use uswap::stats::now_ns;

fn bucket(ns: u64) -> usize {
    let ns = ns.max(1);
    let e = 63 - ns.leading_zeros() as usize;
    let sub = if e >= 2 { ((ns >> (e - 2)) & 3) as usize } else { 0 };
    (e * 4 + sub).min(HIST - 1)
}

fn bucket_value(b: usize) -> u64 {
    let e = b / 4;
    let sub = (b % 4) as u64;
    if e >= 2 {
        (1u64 << e) + (sub << (e - 2))
    } else {
        1 << e
    }
}

impl Counters {
    pub(crate) fn record_latency(&self, ns: u64) {
        self.hist[bucket(ns)].fetch_add(1, Ordering::Relaxed);
    }

    fn percentile(&self, p: f64) -> Option<u64> {
        let v: Vec<u64> = self.hist.iter().map(|h| h.load(Ordering::Relaxed)).collect();
        let total: u64 = v.iter().sum();
        if total == 0 {
            return None;
        }
        let want = ((total as f64) * p).ceil().max(1.0) as u64;
        let mut acc = 0;
        for (i, c) in v.iter().enumerate() {
            acc += c;
            if acc >= want {
                return Some(bucket_value(i));
            }
        }
        None
    }
}

/// A snapshot of a pager's statistics: the `pager` section of the statistics record
/// (`crate::record`), read back by the CLI with the same type.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PagerStats {
    /// Faults handled (all kinds).
    pub faults: u64,
    /// Faults that zero-filled never-used pages.
    pub fault_zero: u64,
    /// Faults that swapped in from the store (major faults).
    pub fault_swapin: u64,
    /// Faults served from the swap cache (inactive list refaults: workingset activations).
    pub fault_cache: u64,
    /// Write-protect faults seen by the handler thread (a write raced an eviction, or hit a
    /// clean page); in SIGBUS mode they are not told apart from missing-page faults.
    pub fault_wp: u64,
    /// Faults on pages already resident (raced with another thread, or discarded by madvise).
    pub fault_spurious: u64,
    /// Times a fault waited for another thread working on the same folio.
    pub fault_waits: u64,
    /// Faults retried because the charge was over the limit while the reclaimer caught up
    /// (thread fault mode).
    pub fault_throttled: u64,
    /// Program allocations that waited for the reclaimer while the charge was over the limit
    /// ([`crate::Pager::wait_for_room`]: memory a heap grows by `brk` takes no fault).
    pub alloc_throttled: u64,
    /// Total time faults were held by the event thread before it resolved them (thread fault
    /// mode: a page another thread held, an event pending, or the charge over the limit).
    pub fault_held_ns: u64,
    /// Pages an eviction gave back because the program wrote them while they were being
    /// copied (thread fault mode; the write went through at once instead of waiting for the
    /// batch and a swap-in).
    pub reclaim_handed_back: u64,
    /// Times the event thread moved to the CPU of the thread whose faults it serves (thread
    /// fault mode, `follow_cpu`).
    pub fault_cpu_moves: u64,
    /// Times the event thread pinned the thread it follows beside itself (`uswap-pager/src/cpu.rs`).
    pub fault_cpu_pins: u64,
    /// Times a pin was given up because the pinned thread waited for its CPU.
    pub fault_cpu_pin_backoffs: u64,
    /// Faults on registered memory no region knew (resolved as zero-fill: never evicted).
    pub fault_unowned: u64,
    /// Pages found present in the program's mappings when they were adopted.
    pub adopted_pages: u64,
    /// Mappings (pieces) adopted where they lie.
    pub adopted_regions: u64,
    /// Adopted regions retired after the program unmapped them.
    pub retired_regions: u64,
    /// Page states moved to a new address by the program's `mremap`.
    pub remap_moved_pages: u64,
    /// Events that had to wait for a page held by another thread (processed later).
    pub events_deferred: u64,
    /// Reclaim batches given up because the program unmapped or moved memory meanwhile.
    pub reclaim_aborted: u64,
    /// Folios reclaim passed over (back to the young end of the active list) because every
    /// page of theirs is shared copy-on-write with a fork relative: evicting them here frees
    /// no memory while the relative maps them ([`crate::Pager::set_cow_shared`]).
    pub reclaim_cow_skipped: u64,
    /// Folios reclaim passed over because they hold a pager thread's thread vector
    /// (`own::pinned`).
    pub reclaim_pinned_skipped: u64,
    /// Live regions (adopted or mapped by the pager).
    pub regions_live: u64,
    /// Pages mapped by faults.
    pub pages_mapped: u64,
    /// Pages moved from the active to the inactive list (unmapped, kept uncompressed).
    pub demoted_pages: u64,
    /// Pages swapped back in soon after their eviction and mapped onto the protected list
    /// (the kernel's `workingset_activate_anon`).
    pub workingset_activate: u64,
    /// Pages moved from the protected list to the active list's tail (`pgdeactivate`).
    pub pgdeactivate: u64,
    /// Pages written to the store.
    pub evicted_pages: u64,
    /// Folios (units) written to the store.
    pub evicted_folios: u64,
    /// Reclaim batches run.
    pub reclaim_batches: u64,
    /// Reclaim attempts that could not free anything (store full, nothing evictable).
    pub reclaim_fail: u64,
    /// Times the pool's share of the limit moved (`pool_share`).
    pub pool_share_moves: u64,
    /// `process_madvise`/`madvise` calls made by reclaim.
    pub madvise_calls: u64,
    /// `UFFDIO_WRITEPROTECT` calls made by reclaim.
    pub wp_calls: u64,
    /// Pages brought in by readahead.
    pub swap_ra: u64,
    /// Readahead pages later used.
    pub swap_ra_hit: u64,
    /// Folios swapped out whole, per order (0 = 4 KiB .. 9 = 2 MiB).
    pub swpout: [u64; NR_ORDERS],
    /// Folios that had to be split on swap-out (no contiguous slots), per order.
    pub swpout_fallback: [u64; NR_ORDERS],
    /// Folios swapped in whole, per order.
    pub swpin: [u64; NR_ORDERS],
    /// Large folios swapped in one page at a time (policy or random access), per order.
    pub swpin_fallback: [u64; NR_ORDERS],
    /// Resident bytes (mapped pages).
    pub resident_bytes: u64,
    /// Bytes the swap cache (inactive list, uncompressed) holds in memory: its folios plus free
    /// space not yet trimmed. This is what is charged.
    pub cache_bytes: u64,
    /// Bytes of folios in the swap cache.
    pub cache_live_bytes: u64,
    /// Bytes in the store's pool.
    pub pool_bytes: u64,
    /// resident + cache + pool (what the limit caps).
    pub charged_bytes: u64,
    /// The limit (as configured).
    pub limit_bytes: u64,
    /// The limit in force for the process ([`crate::Pager::set_limit`]: lower while other
    /// processes of a tree that shares the limit hold their part of it).
    pub limit_in_force_bytes: u64,
    /// The program's anonymous memory outside the pager, charged against the limit
    /// ([`crate::Pager::set_outside`]): the pager keeps its own charge under
    /// `limit_in_force_bytes - outside_bytes` (at least a quarter of it).
    pub outside_bytes: u64,
    /// The store's RAM is capped (at its share of the limit) with the overflow going to a
    /// file tier, so the limit holds for any data; false when every tier is in RAM.
    pub pool_capped: bool,
    /// The pool's share of the limit, in per mille (its cap: `pool_share`).
    pub pool_share_permille: u32,
    /// Median fault latency in ns, if recorded.
    pub fault_p50_ns: Option<u64>,
    /// 99th percentile fault latency in ns, if recorded.
    pub fault_p99_ns: Option<u64>,
    /// Events decoded: munmap, mremap, madvise-remove, fork.
    pub events_unmap: u64,
    /// mremap events.
    pub events_remap: u64,
    /// madvise(DONTNEED) events.
    pub events_remove: u64,
    /// fork events.
    pub events_fork: u64,
    /// Forks during whose hold the event thread worked although the forking thread was not
    /// waiting for a fault of its own (it had been off the CPU for 20 ms with work pending;
    /// `forkhold`).
    pub fork_hold_forced: u64,
    /// Pages the event thread filled for fork children from this process's state, before the
    /// child's own pager ran (glibc's fork code touched them: `forkserve`).
    pub fork_child_faults: u64,
    /// System calls retried after EFAULT by the prefaulting wrappers.
    pub efault_retries: u64,
    /// Store errors seen (evictions abandoned, page kept resident).
    pub store_errors: u64,
    /// Faults mapped over the limit because the store had failed for
    /// `PagerConfig::full_wait_ms` (`stall`).
    pub limit_breaks: u64,
    /// The store fails now (its last store failed).
    pub store_failing: bool,
    /// The two-list policy currently bypasses its inactive stage (streaming access).
    pub inactive_bypassed: bool,
    /// Pages swapped in by a read fault and mapped clean: write-protected, their swap entry
    /// kept (the kernel's clean swap-cache folio that keeps its slot).
    pub clean_kept: u64,
    /// Clean pages written later: a write-protect fault freed their entry.
    pub clean_dirtied: u64,
    /// Clean pages evicted without being written or compressed again.
    pub clean_evicted: u64,
    /// Clean pages found discarded by the program (`MADV_DONTNEED`) at eviction: zero-fill.
    pub clean_discarded: u64,
    /// Swap-in currently keeps clean pages' entries (off while most of them get written).
    pub clean_keeping: bool,
    /// Background recompression passes run (`recomp` module; zram's `recompress type=idle`).
    pub recompress_passes: u64,
    /// Passes put off because the program was faulting heavily or the charge was over the
    /// limit.
    pub recompress_deferred: u64,
    /// Objects re-encoded with the secondary algorithm and moved to a smaller slot (zram's
    /// `num_recompressed`).
    pub num_recompressed: u64,
    /// 4 KiB pages of original data in them.
    pub recompressed_pages: u64,
    /// Objects tried and left as they were (no smaller slot; zram's `incompressible`).
    pub recompress_kept: u64,
    /// Bytes of pool slots given back by recompression (old slot size minus new).
    pub recompress_saved_bytes: u64,
    /// Bytes of pool memory released by the compaction after a pass.
    pub recompress_compacted_bytes: u64,
    /// CPU time of the passes (the recompressor thread's), ns.
    pub recompress_cpu_ns: u64,
    /// The store's own counters.
    pub engine: crate::store::StoreStats,
}

fn arr(a: &[AtomicU64; NR_ORDERS]) -> [u64; NR_ORDERS] {
    std::array::from_fn(|i| a[i].load(Ordering::Relaxed))
}

/// A snapshot of `p`'s counters; `regions_live` is the number of its live regions (counted by
/// the caller in the registry).
pub(crate) fn snapshot(p: &Pager, regions_live: usize) -> PagerStats {
    let c = &p.counters;
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let resident = p.resident_bytes();
    let cache = p.cache.resident_bytes();
    let pool = p.store.pool_bytes();
    PagerStats {
        faults: g(&c.faults),
        fault_zero: g(&c.fault_zero),
        fault_swapin: g(&c.fault_swapin),
        fault_cache: g(&c.fault_cache),
        fault_wp: g(&c.fault_wp),
        fault_spurious: g(&c.fault_spurious),
        fault_waits: g(&c.fault_waits),
        fault_held_ns: g(&c.fault_held_ns),
        reclaim_handed_back: g(&c.reclaim_handed_back),
        fault_cpu_moves: g(&p.place.moves),
        fault_cpu_pins: g(&p.place.pins),
        fault_cpu_pin_backoffs: g(&p.place.pin_backoffs),
        fault_throttled: g(&c.fault_throttled),
        alloc_throttled: g(&c.alloc_throttled),
        fault_unowned: g(&c.fault_unowned),
        adopted_pages: g(&c.adopted_pages),
        adopted_regions: g(&c.adopted_regions),
        retired_regions: g(&c.retired_regions),
        remap_moved_pages: g(&c.remap_moved_pages),
        events_deferred: g(&c.ev_deferred),
        reclaim_aborted: g(&c.reclaim_aborted),
        reclaim_cow_skipped: g(&c.reclaim_cow_skipped),
        reclaim_pinned_skipped: g(&c.reclaim_pinned_skipped),
        regions_live: regions_live as u64,
        pages_mapped: g(&c.pages_mapped),
        demoted_pages: g(&c.demoted_pages),
        workingset_activate: g(&c.workingset_activate),
        pgdeactivate: g(&c.pgdeactivate),
        evicted_pages: g(&c.evicted_pages),
        evicted_folios: g(&c.evicted_folios),
        reclaim_batches: g(&c.reclaim_batches),
        reclaim_fail: g(&c.reclaim_fail),
        pool_share_moves: g(&c.pool_share_moves),
        madvise_calls: g(&c.madvise_calls),
        wp_calls: g(&c.wp_calls),
        swap_ra: g(&c.swap_ra),
        swap_ra_hit: g(&c.swap_ra_hit),
        swpout: arr(&c.swpout),
        swpout_fallback: arr(&c.swpout_fallback),
        swpin: arr(&c.swpin),
        swpin_fallback: arr(&c.swpin_fallback),
        resident_bytes: resident,
        cache_bytes: cache,
        cache_live_bytes: p.cache.live_bytes(),
        pool_bytes: pool,
        charged_bytes: resident + cache + pool,
        limit_bytes: p.cfg.limit_bytes,
        limit_in_force_bytes: p.budget(),
        outside_bytes: p.outside_bytes(),
        pool_capped: p.charge.pool_capped,
        pool_share_permille: p.charge.pool_permille.load(std::sync::atomic::Ordering::Relaxed),
        fault_p50_ns: c.percentile(0.5),
        fault_p99_ns: c.percentile(0.99),
        events_unmap: g(&c.ev_unmap),
        events_remap: g(&c.ev_remap),
        events_remove: g(&c.ev_remove),
        events_fork: g(&c.ev_fork),
        fork_hold_forced: g(&c.fork_hold_forced),
        fork_child_faults: g(&c.fork_child_faults),
        efault_retries: g(&c.efault_retries),
        store_errors: g(&c.store_errors),
        limit_breaks: g(&c.limit_breaks),
        store_failing: p.health.failing(),
        inactive_bypassed: p.lru.ws.bypassed(),
        clean_kept: g(&c.clean_kept),
        clean_dirtied: g(&c.clean_dirtied),
        clean_evicted: g(&c.clean_evicted),
        clean_discarded: g(&c.clean_discarded),
        clean_keeping: p.keep.keeping(),
        recompress_passes: g(&c.recomp_passes),
        recompress_deferred: g(&c.recomp_deferred),
        num_recompressed: g(&c.recomp_objects),
        recompressed_pages: g(&c.recomp_pages),
        recompress_kept: g(&c.recomp_kept),
        recompress_saved_bytes: g(&c.recomp_saved_bytes),
        recompress_compacted_bytes: g(&c.recomp_compacted_bytes),
        recompress_cpu_ns: g(&c.recomp_cpu_ns),
        engine: p.store.stats(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_zeroes_every_counter_and_bucket() {
        let c = Counters::default();
        inc(&c.faults, 3);
        inc(&c.recomp_cpu_ns, 1);
        inc(&c.swpin[2], 5);
        c.record_latency(12_345);
        c.reset();
        assert!(c.all().iter().all(|x| x.load(Ordering::Relaxed) == 0));
        assert_eq!(c.percentile(0.5), None);
    }

    #[test]
    fn histogram_percentiles_are_within_a_bucket() {
        let c = Counters::default();
        for ns in 1..=1000u64 {
            c.record_latency(ns * 10);
        }
        let p50 = c.percentile(0.5).unwrap();
        let p99 = c.percentile(0.99).unwrap();
        assert!((3500..=5000).contains(&p50), "{p50}");
        assert!((8000..=10000).contains(&p99), "{p99}");
    }
}
