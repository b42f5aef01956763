//! Statistics under the kernel's names (`/proc/vmstat` and the per-size mTHP `stats/` files).
//!
//! Counters are sharded: each thread adds to the shard picked by `thread_shard` with a
//! relaxed `fetch_add` on a cache line no other thread writes in the common case, so the hot
//! path costs one uncontended atomic add. A read sums the shards; it is a snapshot that may
//! miss adds in flight, as `/proc/vmstat` does.

use crate::swap_table::NR_ORDERS;
use crate::sync::{thread_shard, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// Global (per engine) counters, named as in `/proc/vmstat`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Event {
    /// Pages read from a physical (file) tier.
    Pswpin,
    /// Pages written to a physical (file) tier.
    Pswpout,
    /// Pages read by readahead.
    SwapRa,
    /// Readahead pages later hit.
    SwapRaHit,
    /// Pages stored into the compressed pool.
    Zswpout,
    /// Pages loaded from the compressed pool.
    Zswpin,
    /// Pages written back from the pool to a physical tier.
    Zswpwb,
    /// Zero pages swapped in (no I/O).
    SwpinZero,
    /// Zero pages swapped out (nothing stored).
    SwpoutZero,
    /// Of `zswpwb`: pages written back by age ([`crate::vswap::Engine::writeback_older_than`],
    /// the `memory.zswap.proactive_writeback` proposal), not because the pool was full.
    ZswpwbProactive,
    /// Pages promoted from a file tier back into a faster tier after a refault
    /// ([`crate::vswap::Engine::promote`]; no kernel counter).
    SwpPromote,
    /// Promotion candidates the faster tier rejected (full, or a group limit): left in place.
    SwpPromoteReject,
    /// Pages moved by [`crate::vswap::Engine::drain_tier`] (online swapoff).
    SwpDrain,
    /// Nanoseconds spent reading and opening what swap-ins loaded from a physical (file) tier
    /// (`pswpin`'s time; no kernel counter): with `zswpin_ns`, what a refault from each tier
    /// costs, for the split of the limit between resident pages and the pool.
    PswpinNs,
    /// Nanoseconds spent decoding what swap-ins loaded from the compressed pool.
    ZswpinNs,
    /// Pages stored in a later tier because an earlier one failed (`crate::fails`; no kernel
    /// counter).
    SwpoutTierFallback,
    /// Pages stored in a RAM tier past the group's pool cap because every tier outside RAM
    /// failed for them.
    ZswpoutOverCap,
    /// Pages no tier took (every one declined or failed): they stay where they were.
    SwpoutRejected,
}

/// Number of [`Event`] variants.
pub const NR_EVENTS: usize = 18;

/// Per-order counters, named as in `hugepages-<size>kB/stats/`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum OrderEvent {
    /// Folios swapped out whole at this order.
    Swpout,
    /// Folios of this order that had to be split (no contiguous slots).
    SwpoutFallback,
    /// Folios swapped in whole at this order.
    Swpin,
    /// Swap-ins that could not be done at this order.
    SwpinFallback,
}

/// Number of [`OrderEvent`] variants.
pub const NR_ORDER_EVENTS: usize = 4;

const NR_SHARDS: usize = 16;

#[derive(Default)]
struct Shard {
    events: [AtomicU64; NR_EVENTS],
    order: [[AtomicU64; NR_ORDERS]; NR_ORDER_EVENTS],
}

/// A set of sharded counters.
pub struct Stats {
    shards: Box<[CachePadded<Shard>]>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats { shards: (0..NR_SHARDS).map(|_| CachePadded::new(Shard::default())).collect() }
    }
}

impl Stats {
    #[inline]
    fn shard(&self) -> &Shard {
        &self.shards[thread_shard() % NR_SHARDS]
    }
    /// Add `n` to a global counter.
    #[inline]
    pub fn add(&self, e: Event, n: u64) {
        self.shard().events[e as usize].fetch_add(n, Ordering::Relaxed);
    }
    /// Add `n` to a per-order counter.
    #[inline]
    pub fn add_order(&self, e: OrderEvent, order: u8, n: u64) {
        self.shard().order[e as usize][usize::from(order).min(NR_ORDERS - 1)].fetch_add(n, Ordering::Relaxed);
    }
    /// Sum of a global counter over all shards.
    pub fn get(&self, e: Event) -> u64 {
        self.shards.iter().map(|s| s.events[e as usize].load(Ordering::Relaxed)).sum()
    }
    /// Sum of a per-order counter over all shards.
    pub fn get_order(&self, e: OrderEvent, order: u8) -> u64 {
        let o = usize::from(order).min(NR_ORDERS - 1);
        self.shards.iter().map(|s| s.order[e as usize][o].load(Ordering::Relaxed)).sum()
    }
    /// Set every counter to zero (a `fork` child's engine: its statistics are its own from the
    /// fork on, so that a tree's sum counts each event once).
    pub fn reset(&self) {
        for sh in self.shards.iter() {
            sh.events.iter().chain(sh.order.iter().flatten()).for_each(|c| c.store(0, Ordering::Relaxed));
        }
    }
    /// A snapshot of every counter, with the kernel's names.
    pub fn snapshot(&self) -> StatsSnapshot {
        let ev = |e| self.get(e);
        let per = |e| std::array::from_fn(|o| self.get_order(e, o as u8));
        StatsSnapshot {
            pswpin: ev(Event::Pswpin),
            pswpout: ev(Event::Pswpout),
            swap_ra: ev(Event::SwapRa),
            swap_ra_hit: ev(Event::SwapRaHit),
            zswpout: ev(Event::Zswpout),
            zswpin: ev(Event::Zswpin),
            zswpwb: ev(Event::Zswpwb),
            swpin_zero: ev(Event::SwpinZero),
            swpout_zero: ev(Event::SwpoutZero),
            zswpwb_proactive: ev(Event::ZswpwbProactive),
            swp_promote: ev(Event::SwpPromote),
            swp_promote_reject: ev(Event::SwpPromoteReject),
            swp_drain: ev(Event::SwpDrain),
            pswpin_ns: ev(Event::PswpinNs),
            zswpin_ns: ev(Event::ZswpinNs),
            swpout_tier_fallback: ev(Event::SwpoutTierFallback),
            zswpout_over_cap: ev(Event::ZswpoutOverCap),
            swpout_rejected: ev(Event::SwpoutRejected),
            swpout: per(OrderEvent::Swpout),
            swpout_fallback: per(OrderEvent::SwpoutFallback),
            swpin: per(OrderEvent::Swpin),
            swpin_fallback: per(OrderEvent::SwpinFallback),
        }
    }
}

/// Monotonic nanoseconds (vDSO `clock_gettime`: no system call, signal-safe).
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the one timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Every counter at one moment, with the kernel's names. Per-order arrays are indexed by
/// order (0 = 4 KiB ... 9 = 2 MiB).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct StatsSnapshot {
    pub pswpin: u64,
    pub pswpout: u64,
    pub swap_ra: u64,
    pub swap_ra_hit: u64,
    pub zswpout: u64,
    pub zswpin: u64,
    pub zswpwb: u64,
    pub swpin_zero: u64,
    pub swpout_zero: u64,
    pub zswpwb_proactive: u64,
    pub swp_promote: u64,
    pub swp_promote_reject: u64,
    pub swp_drain: u64,
    pub pswpin_ns: u64,
    pub zswpin_ns: u64,
    pub swpout_tier_fallback: u64,
    pub zswpout_over_cap: u64,
    pub swpout_rejected: u64,
    pub swpout: [u64; NR_ORDERS],
    pub swpout_fallback: [u64; NR_ORDERS],
    pub swpin: [u64; NR_ORDERS],
    pub swpin_fallback: [u64; NR_ORDERS],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_zeroes_every_counter() {
        let s = Stats::default();
        s.add(Event::Pswpin, 7);
        s.add_order(OrderEvent::SwpinFallback, 3, 2);
        s.reset();
        assert_eq!(s.get(Event::Pswpin), 0);
        assert_eq!(s.get_order(OrderEvent::SwpinFallback, 3), 0);
    }

    #[test]
    fn counts_from_many_threads_add_up() {
        let s = std::sync::Arc::new(Stats::default());
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        s.add(Event::Pswpout, 1);
                        s.add_order(OrderEvent::Swpout, 4, 2);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let snap = s.snapshot();
        assert_eq!(snap.pswpout, 4000);
        assert_eq!(snap.swpout[4], 8000);
        assert_eq!(snap.swpout[0], 0);
    }
}
