//! loom model of concurrent allocation and freeing in one cluster.
//!
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p uswap --test loom_cluster`
//! (a separate target dir keeps the normal build cache).
//!
//! Two threads allocate and free order-0 slots in a one-cluster space: each free may empty
//! the cluster and retire its table while the other thread allocates into it (table
//! reallocation) or loads a slot lock-free. loom explores the interleavings of the shard,
//! cluster and list locks and the table pointer: a live slot is never handed out again, a load
//! never sees a foreign word, and the space ends consistent (lists, flags, tables). A third
//! model makes a never-used cluster ready (`cluster/array.rs`) while another thread reads it
//! lock-free and makes the next one ready by another path.
#![cfg(loom)]

use loom::thread;
use std::sync::Arc;
use uswap::internals::cluster::{FragPolicy, SpaceConfig, SwapSpace};
use uswap::internals::swap_table::{Word, SLOTS_PER_CLUSTER};

/// Run `f` under loom with the bounds every model here uses.
fn explore(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.max_branches = 50_000;
    b.check(f);
}

/// A space of `clusters` clusters, no discard.
fn space(clusters: usize, policy: FragPolicy, shards: usize) -> Arc<SwapSpace> {
    Arc::new(
        SwapSpace::new(SpaceConfig {
            nr_slots: (clusters * SLOTS_PER_CLUSTER) as u64,
            frag_policy: policy,
            discard: false,
            nr_shards: shards,
        })
        .unwrap(),
    )
}

fn model(shards: usize, policy: FragPolicy) {
    explore(move || {
        let s = space(1, policy, shards);
        let a = s.alloc(0, &mut |_| Word::zero(1, 1)).unwrap();
        let s2 = s.clone();
        let t = thread::spawn(move || {
            let b = s2.alloc(0, &mut |_| Word::stored(2, 0, 10, 1)).unwrap();
            let w = s2.load(b).unwrap();
            assert_eq!((w.group(), w.payload()), (2, 10), "own slot changed under us: {w:?}");
            s2.lock_cluster(b).unwrap().free_range(b.offset(), 1).unwrap();
            b
        });
        // Free `a` (may empty the cluster and retire its table while the other thread
        // allocates into it or reads it), then allocate again.
        s.lock_cluster(a).unwrap().free_range(a.offset(), 1).unwrap();
        let w = s.load(a).unwrap();
        assert!(w.is_free() || w.group() == 2, "freed slot shows {w:?}");
        let c = s.alloc(0, &mut |_| Word::stored(3, 0, 77, 1)).unwrap();
        let _b = t.join().unwrap();
        let w = s.load(c).unwrap();
        assert_eq!((w.group(), w.payload()), (3, 77), "slot {c:?} was handed out twice: {w:?}");
        assert_eq!(s.used_slots(), 1);
        s.check_invariants().unwrap();
        s.lock_cluster(c).unwrap().free_range(c.offset(), 1).unwrap();
        assert_eq!(s.live_tables(), 0);
        s.check_invariants().unwrap();
    });
}

/// Order-0 stealing isolates the cluster from `frag[1]` (list lock held, cluster lock only
/// tried) while the other thread frees the order-1 folio there and relocates the cluster
/// (cluster lock held, then the list lock): the lock-order rule under test.
fn steal_vs_free(policy: FragPolicy) {
    explore(move || {
        let s = space(1, policy, 1);
        let f = s.alloc(1, &mut |_| Word::zero(1, 1)).unwrap();
        let s2 = s.clone();
        let t = thread::spawn(move || {
            let e = s2.alloc(0, &mut |_| Word::stored(2, 0, 5, 1)).unwrap();
            assert_eq!(s2.load(e).unwrap().payload(), 5);
            e
        });
        s.lock_cluster(f).unwrap().free_range(f.offset(), 2).unwrap();
        let e = t.join().unwrap();
        assert_eq!(s.used_slots(), 1);
        s.check_invariants().unwrap();
        let w = s.load(e).unwrap();
        assert_eq!((w.group(), w.payload()), (2, 5));
        s.lock_cluster(e).unwrap().free_range(e.offset(), 1).unwrap();
        assert_eq!(s.live_tables(), 0);
        s.check_invariants().unwrap();
    });
}

/// The first allocation makes cluster 0 ready (list lock held, then `ready` published) while
/// the other thread reads a slot of it lock-free (`ready` read with Acquire, no lock) and
/// touches a slot of cluster 1, which makes clusters up to 1 ready by the other path.
fn first_use_races_readers() {
    explore(move || {
        let s = space(2, FragPolicy::ScanOne, 1);
        let s2 = s.clone();
        let t = thread::spawn(move || {
            let e = s2.alloc(0, &mut |_| Word::stored(2, 0, 9, 1)).unwrap();
            assert_eq!(s2.load(e).unwrap().payload(), 9);
            e
        });
        let w = s.load(uswap::SwapEntry(0)).unwrap();
        assert!(w.is_free() || w.payload() == 9, "slot 0 shows {w:?}");
        let far = uswap::SwapEntry(SLOTS_PER_CLUSTER as u64);
        assert!(s.lock_cluster(far).unwrap().free_range(far.offset(), 1).is_err());
        let e = t.join().unwrap();
        assert_eq!(e.cluster(), 0, "never-used clusters are taken in order");
        assert_eq!(s.used_slots(), 1);
        s.check_invariants().unwrap();
    });
}

#[test]
fn first_use_of_a_cluster_races_readers() {
    first_use_races_readers();
}

#[test]
fn steal_vs_free_scan_one() {
    steal_vs_free(FragPolicy::ScanOne);
}

#[test]
fn steal_vs_free_buckets() {
    steal_vs_free(FragPolicy::Buckets);
}

#[test]
fn alloc_free_race_shared_shard() {
    model(1, FragPolicy::ScanOne);
}

#[test]
fn alloc_free_race_buckets() {
    model(1, FragPolicy::Buckets);
}
