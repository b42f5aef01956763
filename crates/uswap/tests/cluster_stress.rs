//! Multithreaded stress test of the cluster allocator with real threads.
//!
//! Writers allocate folios of mixed orders in a small space (so they fight over the same
//! clusters and lists), stamp every slot with a payload unique to (thread, folio, slot), check
//! the stamps are still theirs before freeing (a slot handed out twice would be overwritten),
//! and free in random order. A reader thread meanwhile loads random slots lock-free, racing
//! the table retirement of emptied clusters. At the end everything is freed and the space must
//! be back to its initial state.
#![cfg(not(loom))]

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use uswap::internals::cluster::{FragPolicy, SpaceConfig, SwapSpace};
use uswap::internals::swap_table::{Kind, Word, SLOTS_PER_CLUSTER};
use uswap::{SwapEntry, SwapError};

const N: usize = SLOTS_PER_CLUSTER;

fn stress(policy: FragPolicy, discard: bool) {
    let s =
        SwapSpace::new(SpaceConfig { nr_slots: (6 * N) as u64, frag_policy: policy, discard, nr_shards: 4 }).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut rng = SmallRng::seed_from_u64(99);
            let mut seen = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let e = SwapEntry(rng.random_range(0..s.nr_slots()));
                let w = s.load(e).unwrap();
                assert!(w.is_free() || w.kind() == Kind::Stored, "torn or foreign word {w:?}");
                seen += u64::from(!w.is_free());
                if discard && rng.random_ratio(1, 64) {
                    s.process_discards(&mut |_| {});
                }
            }
            assert!(seen > 0 || s.used_slots() == 0);
        });
        let writers: Vec<_> = (0..3u64)
            .map(|t| {
                let s = &s;
                sc.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t);
                    let mut held: Vec<(SwapEntry, u8, u64)> = Vec::new();
                    for round in 0..20_000u64 {
                        if held.len() < 40 && rng.random_ratio(3, 5) {
                            let order = [0u8, 0, 0, 1, 2, 4, 9][rng.random_range(0..7)];
                            let tag = (t << 32) | (round << 10);
                            match s.alloc(order, &mut |i| Word::stored(t as u16, 2, tag | i as u64, 1)) {
                                Ok(e) => {
                                    assert_eq!(e.0 % (1 << order), 0);
                                    held.push((e, order, tag));
                                }
                                Err(SwapError::NoSpace { .. }) => {}
                                Err(e) => panic!("alloc: {e}"),
                            }
                        } else if !held.is_empty() {
                            let (e, order, tag) = held.swap_remove(rng.random_range(0..held.len()));
                            let mut g = s.lock_cluster(e).unwrap();
                            for i in 0..1usize << order {
                                let w = g.word(e.offset() + i);
                                assert_eq!(
                                    w.payload(),
                                    tag | i as u64,
                                    "slot {:#x} was handed out twice",
                                    e.0 + i as u64
                                );
                            }
                            if rng.random_ratio(1, 4) {
                                g.set_count(e.offset(), 40).unwrap();
                                assert_eq!(g.count(e.offset()), 40);
                            }
                            g.free_range(e.offset(), 1 << order).unwrap();
                        }
                    }
                    held
                })
            })
            .collect();
        let leftovers: Vec<_> = writers.into_iter().flat_map(|h| h.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        for (e, order, _) in leftovers {
            s.lock_cluster(e).unwrap().free_range(e.offset(), 1 << order).unwrap();
        }
    });
    s.process_discards(&mut |_| {});
    s.check_invariants().unwrap();
    assert_eq!((s.used_slots(), s.live_tables(), s.live_extend_tables()), (0, 0, 0));
    let st = s.alloc_stats();
    assert_eq!(st.free_clusters, 6);
    assert!(st.alloc.iter().sum::<u64>() > 0);
}

#[test]
fn stress_scan_one() {
    stress(FragPolicy::ScanOne, false);
}

#[test]
fn stress_buckets_discard() {
    stress(FragPolicy::Buckets, true);
}
