//! Unit tests of the space: allocation and freeing round trips, the extend table, order 0
//! finding every free slot, metadata following real allocations, a bad `init` word, discard.
//!
//! Locking: as the space's API.

use super::state::{Cluster, N};
use super::{FragPolicy, SpaceConfig, SwapSpace};
use crate::swap_table::{SwapEntry, SwapTable, Word};
use crate::SwapError;

#[test]
fn space_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<SwapSpace>();
    check::<std::sync::Arc<SwapSpace>>();
}

fn space(clusters: usize, policy: FragPolicy) -> SwapSpace {
    SwapSpace::new(SpaceConfig { nr_slots: (clusters * N) as u64, frag_policy: policy, discard: false, nr_shards: 1 })
        .unwrap()
}

#[test]
fn alloc_load_free_round_trip() {
    let s = space(2, FragPolicy::ScanOne);
    let e = s.alloc(2, &mut |i| Word::stored(1, 0, i as u64, 1)).unwrap();
    assert_eq!(e.0 % 4, 0);
    for i in 0..4 {
        assert_eq!(s.load(e.add(i)).unwrap().payload(), i);
    }
    assert_eq!(s.used_slots(), 4);
    assert_eq!(s.live_tables(), 1);
    s.check_invariants().unwrap();
    {
        let mut g = s.lock_cluster(e).unwrap();
        g.free_range(e.offset(), 4).unwrap();
        assert_eq!(g.free_range(e.offset(), 1), Err(SwapError::NotInUse(e.0)));
    }
    assert_eq!(s.load(e).unwrap(), Word::FREE);
    assert_eq!(s.live_tables(), 0);
    s.check_invariants().unwrap();
    assert_eq!(s.load(SwapEntry(s.nr_slots())), Err(SwapError::OutOfRange(s.nr_slots())));
}

#[test]
fn counts_overflow_into_extend_table_and_back() {
    let s = space(1, FragPolicy::ScanOne);
    let e = s.alloc(0, &mut |_| Word::zero(0, 1)).unwrap();
    let mut g = s.lock_cluster(e).unwrap();
    let off = e.offset();
    for n in [14u32, 15, 70000, 15, 14, 3] {
        g.set_count(off, n).unwrap();
        assert_eq!(g.count(off), n);
        assert_eq!(s.live_extend_tables(), usize::from(n >= 15));
    }
    g.set(off, Word::stored(2, 1, 99, 7)).unwrap();
    assert_eq!(g.count(off), 3, "set keeps the count");
    assert_eq!(g.word(off).payload(), 99);
    drop(g);
    s.check_invariants().unwrap();
}

#[test]
fn order0_never_fails_while_a_slot_is_free() {
    for policy in [FragPolicy::ScanOne, FragPolicy::Buckets] {
        let s = space(3, policy);
        let mut held = Vec::new();
        // Fill with order-4 folios, free one slot in each, then order 0 must find them.
        while let Ok(e) = s.alloc(4, &mut |_| Word::zero(0, 1)) {
            held.push(e);
        }
        assert_eq!(s.used_slots(), 3 * N);
        for e in held.iter().step_by(7) {
            s.lock_cluster(*e).unwrap().free_range(e.offset() + 3, 1).unwrap();
        }
        let free = s.nr_slots() as usize - s.used_slots();
        for _ in 0..free {
            s.alloc(0, &mut |_| Word::zero(0, 1)).unwrap();
        }
        assert_eq!(s.alloc(0, &mut |_| Word::zero(0, 1)), Err(SwapError::NoSpace { order: 0 }));
        s.check_invariants().unwrap();
    }
}

#[test]
fn metadata_follows_real_allocations() {
    let s = space(64, FragPolicy::Buckets);
    let empty = s.metadata_bytes();
    let per_cluster = std::mem::size_of::<Cluster>() + 10;
    assert!(per_cluster <= 128, "cluster state grew to {per_cluster} bytes");
    // No cluster is ready before the first allocation: they cost nothing yet.
    assert!(empty < 16 * 1024, "empty space costs {empty} bytes");
    let e = s.alloc(0, &mut |_| Word::zero(0, 1)).unwrap();
    // One cluster made ready, with its table.
    let one = empty + per_cluster;
    assert_eq!(s.metadata_bytes(), one + std::mem::size_of::<SwapTable>());
    s.lock_cluster(e).unwrap().set_count(e.offset(), 99).unwrap();
    assert_eq!(s.metadata_bytes(), one + std::mem::size_of::<SwapTable>() + 4 * N);
    s.lock_cluster(e).unwrap().free_range(e.offset(), 1).unwrap();
    // The table goes; the cluster stays ready.
    assert_eq!(s.metadata_bytes(), one);
    s.check_invariants().unwrap();
}

#[test]
fn bad_init_word_allocates_nothing() {
    let s = space(1, FragPolicy::ScanOne);
    let r = s.alloc(3, &mut |i| if i == 5 { Word::FREE } else { Word::zero(0, 1) });
    assert!(matches!(r, Err(SwapError::BadFolio { .. })));
    assert_eq!(s.used_slots(), 0);
    assert_eq!(s.live_tables(), 0);
    s.check_invariants().unwrap();
}

#[test]
fn discard_list_holds_emptied_clusters() {
    let s = SwapSpace::new(SpaceConfig { nr_slots: 2 * N as u64, discard: true, nr_shards: 1, ..Default::default() })
        .unwrap();
    let e = s.alloc(9, &mut |_| Word::zero(0, 1)).unwrap();
    s.lock_cluster(e).unwrap().free_range(0, N).unwrap();
    assert_eq!(s.alloc_stats().discard_clusters, 1);
    s.check_invariants().unwrap();
    let mut seen = Vec::new();
    assert_eq!(s.process_discards(&mut |c| seen.push(c)), 1);
    assert_eq!(seen, vec![e.cluster()]);
    assert_eq!(s.alloc_stats().free_clusters, 2);
    s.check_invariants().unwrap();
}
