//! The split of the limit between resident pages and the compressed pool: [`PoolShare`].
//!
//! With a swap file behind the pool, everything the process holds in RAM — resident pages,
//! swap cache and pool — is charged to one limit, and the pool may take a share of it (its cap,
//! [`Pager::pool_cap`](crate::Pager)). Which share is best depends on the workload, as the
//! balance between zswap and the anonymous LRU does inside a memory cgroup:
//!
//! - a larger pool holds more of the data in RAM (it is compressed there), so fewer swap-ins
//!   read the file, the expensive ones (`c_file`: a disk read);
//! - but it leaves less room for resident pages, so more touches fault and decode from the
//!   pool (`c_pool`: a fault and a decode).
//!
//! The share follows the balance of the time the two kinds of swap-in cost: it grows while
//! the file's swap-ins cost more than the pool's over the last period, and shrinks while they
//! cost less, as zswap's shrinker backs off writeback when disk swap-ins appear. A workload
//! that reads its data at random over more than fits settles with a large pool; one with a hot
//! set that must stay resident, or data that does not compress (the pool then holds nothing
//! worth its room), with a small one. The costs are measured: the engine times what swap-ins
//! spend in each tier (`zswpin_ns`, `pswpin_ns`), and [`FAULT_NS`] adds the fault around it.
//! A period with too few swap-ins to tell ([`MIN_SWAPINS`]) changes nothing: a workload that
//! streams, or does not swap, keeps the share it has.
//!
//! Off by default ([`crate::launch::POOL_ADAPT`] under `uswap run`): the balance of the two
//! costs is not where their sum is least, and a pool grown for the file's sake takes from a
//! resident set whose faults this does not see coming.
//!
//! Locking: none. The state is the background reclaimer's own; it publishes the share as one
//! relaxed atomic of the pager, which [`Pager::pool_cap`](crate::Pager) reads.

use crate::store::TierRefaults;

/// Smallest and largest share of the limit the pool may be given, in per mille: some
/// resident room is always left for the pages being touched.
pub(crate) const MIN_PERMILLE: u32 = 50;
pub(crate) const MAX_PERMILLE: u32 = 500;
/// The smallest step of the share, in per mille of the limit (it moves by a quarter of
/// itself up and a fifth down, so that it crosses its range in about ten periods).
const STEP: u32 = 25;
/// How often the share is reconsidered.
pub(crate) const PERIOD_NS: u64 = 100_000_000;
/// Swap-ins (pages, both tiers) a period needs before it says anything.
const MIN_SWAPINS: u64 = 64;
/// What a swap-in costs beyond the tier's own work (the fault's delivery, the hand-off to the
/// pager's thread and back, mapping the page). Under `uswap run` a fault is a hand-off between
/// threads: a few µs when both run on one CPU, tens of µs for a wake-up across two. Taken too
/// low, the pool is grown past the point
/// where its faults cost more than the file reads it saves.
const FAULT_NS: u64 = 30_000;
/// A move needs its side to win by this factor (hysteresis against noise).
const MARGIN: f64 = 1.25;
/// Below this compression ratio the pool is not given more room.
const MIN_RATIO: f64 = 1.3;

/// The controller's memory between periods.
#[derive(Default)]
pub(crate) struct PoolShare {
    last: Option<TierRefaults>,
    last_ns: u64,
}

impl PoolShare {
    /// Called by the background reclaimer at `now_ns` with the store's counters: the new share
    /// in per mille, or `None` when the period is not over or nothing changes.
    pub(crate) fn update(&mut self, now_ns: u64, now: Option<TierRefaults>, share: u32) -> Option<u32> {
        if now_ns < self.last_ns + PERIOD_NS {
            return None;
        }
        let now = now?;
        let prev = self.last.replace(now);
        self.last_ns = now_ns;
        let next = decide(&prev?, &now, share);
        (next != share).then_some(next)
    }
}

/// The next share (per mille) from counters a period apart.
pub(crate) fn decide(prev: &TierRefaults, now: &TierRefaults, share: u32) -> u32 {
    let (dz, df) = (now.pool_in.saturating_sub(prev.pool_in), now.file_in.saturating_sub(prev.file_in));
    if dz + df < MIN_SWAPINS {
        return share;
    }
    let cost = |pages: u64, ns: u64| (pages * FAULT_NS + ns) as f64;
    let pool = cost(dz, now.pool_in_ns.saturating_sub(prev.pool_in_ns));
    let file = cost(df, now.file_in_ns.saturating_sub(prev.file_in_ns));
    // Data that does not compress gains nothing in the pool.
    let compresses = now.pool_ram == 0 || now.pool_data as f64 > now.pool_ram as f64 * MIN_RATIO;
    if file > pool * MARGIN && compresses {
        (share + (share / 4).max(STEP)).min(MAX_PERMILLE)
    } else if file * MARGIN < pool || !compresses {
        share.saturating_sub((share / 5).max(STEP)).max(MIN_PERMILLE)
    } else {
        share
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn at(pool_in: u64, file_in: u64, pool_data: u64, pool_ram: u64, file_data: u64) -> TierRefaults {
        TierRefaults {
            pool_in,
            pool_in_ns: pool_in * 3_000,
            file_in,
            file_in_ns: file_in * 90_000,
            pool_data,
            pool_ram,
            file_data,
        }
    }

    #[test]
    fn file_swapins_that_cost_more_grow_the_pool() {
        // Random reads over 300 MB, 3x compressible, a 10 MB pool: most swap-ins read the file.
        let (p0, p1) = (at(0, 0, 30 * MB, 10 * MB, 270 * MB), at(1_000, 9_000, 30 * MB, 10 * MB, 270 * MB));
        assert_eq!(decide(&p0, &p1, 80), 80 + STEP);
        assert_eq!(decide(&p0, &p1, 400), 500);
        assert_eq!(decide(&p0, &p1, MAX_PERMILLE), MAX_PERMILLE);
    }

    #[test]
    fn data_that_does_not_compress_shrinks_it() {
        let (p0, p1) = (at(0, 0, 30 * MB, 29 * MB, 270 * MB), at(1_000, 9_000, 30 * MB, 29 * MB, 270 * MB));
        assert_eq!(decide(&p0, &p1, 200), 160);
        assert_eq!(decide(&p0, &p1, MIN_PERMILLE), MIN_PERMILLE);
    }

    #[test]
    fn pool_swapins_that_cost_more_shrink_it() {
        // A hot set squeezed out of resident memory faults from the pool; the file is read
        // now and then: resident room is worth more than more pool.
        let (p0, p1) = (at(0, 0, 60 * MB, 20 * MB, 500 * MB), at(20_000, 100, 60 * MB, 20 * MB, 500 * MB));
        assert_eq!(decide(&p0, &p1, 500), 400);
    }

    #[test]
    fn balanced_costs_or_too_few_swapins_change_nothing() {
        let p0 = at(0, 0, 30 * MB, 10 * MB, 300 * MB);
        assert_eq!(decide(&p0, &at(10, 10, 30 * MB, 10 * MB, 0), 300), 300, "too few to tell");
        // 3000 pool swap-ins at 33 µs against 1000 file reads at 120 µs.
        assert_eq!(decide(&p0, &at(3_000, 1_000, 30 * MB, 10 * MB, 300 * MB), 300), 300);
    }

    #[test]
    fn the_share_moves_once_per_period() {
        let mut s = PoolShare::default();
        let a = at(0, 0, 30 * MB, 10 * MB, 270 * MB);
        let b = at(1_000, 9_000, 30 * MB, 10 * MB, 270 * MB);
        assert_eq!(s.update(PERIOD_NS, Some(a), 80), None, "the first period only records");
        assert_eq!(s.update(PERIOD_NS + 1, Some(b), 80), None, "within the period");
        assert_eq!(s.update(2 * PERIOD_NS, Some(b), 80), Some(80 + STEP));
        assert_eq!(s.update(3 * PERIOD_NS, Some(b), 105), None, "nothing happened since");
    }
}
