//! Fragment-cluster search policy: Chris Li's buckets (his review of "mm, swap: only scan one cluster in fragment list") and the success model.
//!
//! Locking: none. This file owns no lock and no shared state: the probability table is
//! computed once and read-only, and the per-bucket estimates live in the caller's allocator
//! shard (under its lock).
//!
//! # The success model P(order, used)
//! A cluster has `N = 512` slots of which `used` are taken, placed uniformly at random. An
//! allocation of order `o` needs one of the `W = N / s` naturally aligned windows of `s = 2^o`
//! slots to be completely free. Let `A(W, u)` be the number of ways to place `u` used slots
//! so that *every* window holds at least one (no window free). Windows are disjoint, so
//! `A` is a convolution over windows:
//!
//! ```text
//! A(0, 0) = 1,  A(0, u>0) = 0,  F(0, u) = 0
//! A(w+1, u) = sum_{k=1..min(s,u)} C(s, k) * A(w, u - k)
//! F(w+1, u) = A(w, u) + sum_{k=0..min(s,u)} C(s, k) * F(w, u - k)
//! P(o, used) = F(W, used) / C(N, used)        (= 1 - A(W, used) / C(N, used))
//! ```
//!
//! `F` counts the placements with at least one free window (the window just added is the
//! first free one, or one was free before). All terms are positive, so the table is computed
//! in `f64` without cancellation, even where P is 1e-40 (neither `1 - A/C` nor the
//! inclusion–exclusion form `sum_j (-1)^(j+1) C(W, j) C(N - j s, u) / C(N, u)` would be).
//! It costs about `N^2` multiply-adds per order (a few million for all ten), once per process.
//!
//! Real clusters are not random: a cluster serving order `o` holds aligned order-`o` blocks, so
//! the model is pessimistic for them and fair for clusters salted with stolen order-0 slots.
//! The model is therefore only the *prior*: each bucket's success estimate is
//! `(hits + K * P) / (scans + K)` over the shard's recent scans of that bucket (halved every
//! `DECAY_AT` scans), so the cut-offs follow what the clusters really look like.
//!
//! # Buckets and cut-offs
//! Frag clusters of an order are split into [`NR_BUCKETS`] lists by free slots, halving from
//! one bucket to the next (more than 256 free, more than 128, 64, 32, 16, at most 16), so the
//! classes stay distinct when the space is nearly full; the freest bucket is tried first. Bucket `b` with
//! estimate `p` gets a search budget of
//!
//! ```text
//! budget = 0                                   if p < P_MIN (give up on this bucket)
//! budget = clamp(ceil(ln(1 - T) / ln(1 - p)), 1, MAX_PER_BUCKET)   otherwise
//! ```
//!
//! the number of clusters to try to find a window with probability `T` if the estimate holds;
//! more tries than that mean the estimate is wrong and the search stops. A skipped bucket is
//! still probed once every `EXPLORE_EVERY` allocations so its estimate can recover, and a
//! bucket whose clusters cannot hold `2^o` free slots is never tried. A frag cluster changes
//! bucket when an allocation changes its count (a free moves it to `nonfull`, as in the kernel).
//!
//! The buckets also order order-0 stealing: it takes frag clusters fullest bucket first, so
//! the clusters most likely to serve their own order again are the last to be broken up
//! (`ScanOne` steals in list order, as the kernel). `uswap bench alloc` shows this matters
//! more for the fallback rate than the frag search itself, whose hit rate is low under both
//! policies (a cluster with a new hole goes back to `nonfull`).

use crate::swap_table::{NR_ORDERS, SLOTS_PER_CLUSTER};
use std::sync::OnceLock;

const N: usize = SLOTS_PER_CLUSTER;

/// Number of frag buckets per order under [`FragPolicy::Buckets`](super::FragPolicy).
pub(crate) const NR_BUCKETS: usize = 6;
/// Exclusive upper bound of each bucket's used count. Free space halves from one bucket to
/// the next (more than 256 free, 128, 64, 32, 16, at most 16), so the buckets still tell
/// clusters apart when the whole space is 90 % full.
const BUCKET_END: [u16; NR_BUCKETS] = [256, 384, 448, 480, 496, N as u16 + 1];
/// Below this estimated success probability a bucket is not searched.
pub(super) const P_MIN: f64 = 0.05;
/// Target probability of success within one bucket's budget.
pub(super) const TARGET: f64 = 0.9;
/// Largest number of clusters tried in one bucket per allocation.
pub(super) const MAX_PER_BUCKET: u32 = 8;
/// Weight of the model prior, in scans.
pub(super) const PRIOR_WEIGHT: f64 = 8.0;
/// Halve a bucket's scan/hit estimate when it reaches this many scans.
pub(super) const DECAY_AT: f64 = 256.0;
/// A skipped bucket is probed once per this many allocations.
pub(super) const EXPLORE_EVERY: u32 = 64;

fn table() -> &'static [Box<[f64]>] {
    static T: OnceLock<Vec<Box<[f64]>>> = OnceLock::new();
    T.get_or_init(|| {
        // Binomials C(n, k) for n <= N as f64 (C(512, 256) ~ 4.7e152 fits).
        let mut c = vec![vec![0f64; N + 1]; N + 1];
        for n in 0..=N {
            c[n][0] = 1.0;
            for k in 1..=n {
                c[n][k] = c[n - 1][k - 1] + if k < n { c[n - 1][k] } else { 0.0 };
            }
        }
        (0..NR_ORDERS)
            .map(|o| {
                let s = 1usize << o;
                let w = N / s;
                // a[u]: placements with no free window so far; f[u]: with at least one.
                let mut a = vec![0f64; N + 1];
                let mut f = vec![0f64; N + 1];
                a[0] = 1.0;
                for _ in 0..w {
                    let mut a2 = vec![0f64; N + 1];
                    let mut f2 = vec![0f64; N + 1];
                    for u in 0..=N {
                        let (av, fv) = (a[u], f[u]);
                        if av == 0.0 && fv == 0.0 {
                            continue;
                        }
                        // This window left empty (k = 0): now there is a free window.
                        f2[u] += av + fv;
                        for k in 1..=s.min(N - u) {
                            a2[u + k] += av * c[s][k];
                            f2[u + k] += fv * c[s][k];
                        }
                    }
                    a = a2;
                    f = f2;
                }
                (0..=N).map(|u| (f[u] / c[N][u]).clamp(0.0, 1.0)).collect::<Box<[f64]>>()
            })
            .collect()
    })
}

/// P(order, used): the probability that a cluster with `used` randomly placed used slots has
/// a free naturally aligned window of `2^order` slots (see the module doc).
pub(crate) fn success_probability(order: u8, used: usize) -> f64 {
    if order as usize >= NR_ORDERS || used > N {
        return 0.0;
    }
    table()[order as usize][used]
}

/// The bucket of a frag cluster with `used` slots taken (0 = freest).
#[inline]
pub(crate) fn bucket_of(used: u16) -> u8 {
    BUCKET_END.iter().position(|&end| used < end).unwrap_or(NR_BUCKETS - 1) as u8
}

/// The used-count range `[lo, hi)` of bucket `b`.
pub(crate) fn bucket_range(b: u8) -> (u16, u16) {
    let b = (b as usize).min(NR_BUCKETS - 1);
    (if b == 0 { 0 } else { BUCKET_END[b - 1] }, BUCKET_END[b])
}

/// The model's success probability for a bucket (at the middle of its range of used counts
/// that can be in a frag cluster, i.e. below `N`).
pub(crate) fn bucket_prior(order: u8, b: u8) -> f64 {
    let (lo, hi) = bucket_range(b);
    let hi = (hi as usize).min(N);
    success_probability(order, (lo as usize + hi) / 2)
}

/// A bucket's running estimate (per allocator shard).
#[derive(Copy, Clone, Default, Debug)]
pub(super) struct Estimate {
    scans: f64,
    hits: f64,
    skipped: u32,
}

impl Estimate {
    /// Estimated success probability of one scan in this bucket.
    pub(super) fn p(&self, prior: f64) -> f64 {
        (self.hits + PRIOR_WEIGHT * prior) / (self.scans + PRIOR_WEIGHT)
    }

    /// How many clusters to try in this bucket now (0 = skip it).
    pub(super) fn budget(&mut self, prior: f64) -> u32 {
        let p = self.p(prior);
        if p < P_MIN {
            self.skipped += 1;
            if self.skipped >= EXPLORE_EVERY {
                self.skipped = 0;
                return 1;
            }
            return 0;
        }
        if p >= 1.0 {
            return 1;
        }
        let k = ((1.0 - TARGET).ln() / (1.0 - p).ln()).ceil();
        (k as u32).clamp(1, MAX_PER_BUCKET)
    }

    /// Record one scan of a cluster from this bucket.
    pub(super) fn record(&mut self, hit: bool) {
        self.scans += 1.0;
        if hit {
            self.hits += 1.0;
        }
        if self.scans >= DECAY_AT {
            self.scans /= 2.0;
            self.hits /= 2.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact probability by brute force on a small analogue is not possible for N = 512, so
    /// check the closed forms we know: order 0, a single window, and the full/empty ends.
    #[test]
    fn model_matches_closed_forms() {
        for u in 0..N {
            assert_eq!(success_probability(0, u), 1.0);
        }
        assert_eq!(success_probability(0, N), 0.0);
        // Order 9: the only window is the whole cluster.
        assert_eq!(success_probability(9, 0), 1.0);
        assert_eq!(success_probability(9, 1), 0.0);
        // Order 8: two windows; free iff all used slots are in one half.
        for u in [1usize, 2, 5, 100, 256] {
            let one_half = (0..u).map(|i| (256 - i) as f64 / (512 - i) as f64).product::<f64>();
            let expect = 2.0 * one_half;
            let got = success_probability(8, u);
            assert!((got - expect).abs() < 1e-9 * expect.max(1e-300), "u={u} got={got} want={expect}");
        }
        assert_eq!(success_probability(8, 257), 0.0);
        // Monotone in used, and in order.
        for o in 1..NR_ORDERS as u8 {
            for u in 1..=N {
                assert!(success_probability(o, u) <= success_probability(o, u - 1) + 1e-12);
                assert!(success_probability(o, u) <= success_probability(o - 1, u) + 1e-12);
            }
        }
    }

    #[test]
    fn buckets_cover_the_range() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(255), 0);
        assert_eq!(bucket_of(256), 1);
        assert_eq!(bucket_of(495), 4);
        assert_eq!(bucket_of(511), 5);
        assert_eq!(bucket_range(5), (496, 513));
        for b in 0..NR_BUCKETS as u8 {
            let (lo, hi) = bucket_range(b);
            assert_eq!(bucket_of(lo), b);
            assert_eq!(bucket_of(hi - 1), b);
        }
    }

    #[test]
    fn budget_follows_estimate() {
        let mut e = Estimate::default();
        assert_eq!(e.budget(1.0), 1);
        assert_eq!(e.budget(0.3), 7); // ln 0.1 / ln 0.7 = 6.46
        assert_eq!(e.budget(0.01), 0);
        for _ in 0..100 {
            e.record(true);
        }
        assert_eq!(e.budget(0.0), 1, "observed hits override a pessimistic prior");
        let mut skip = Estimate::default();
        let probes = (0..EXPLORE_EVERY * 3).filter(|_| skip.budget(0.0) > 0).count();
        assert_eq!(probes, 3);
    }
}
