//! A swap space costs memory for the clusters it uses, not for the ones it could use: every
//! `uswap run` process has a 16 M-slot virtual space (32 768 clusters), and writing every
//! cluster's descriptor at creation would cost megabytes of resident memory per process.
//!
//! Its own test binary (one process, one test), so the resident-set figures it reads are its
//! own.
#![cfg(not(loom))]

use uswap::internals::cluster::{SpaceConfig, SwapSpace};
use uswap::internals::swap_table::{Word, SLOTS_PER_CLUSTER};
use uswap::SwapEntry;

/// Resident bytes of this process (`/proc/self/statm`, second field).
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = s.split_whitespace().nth(1).and_then(|f| f.parse().ok()).expect("statm field 2");
    pages * 4096
}

#[test]
fn a_large_space_commits_memory_only_for_the_clusters_it_uses() {
    let slots = 1u64 << 24;
    let before = rss();
    let s = SwapSpace::new(SpaceConfig { nr_slots: slots, ..Default::default() }).unwrap();
    let grown = rss().saturating_sub(before);
    // All written at creation, 32 768 descriptors of ~106 bytes and 10 bytes of links each
    // would be several times this bound.
    assert!(grown < 1 << 20, "creating a {slots}-slot space made {grown} bytes resident");
    assert!(s.metadata_bytes() < 64 << 10, "an unused space reports {} bytes", s.metadata_bytes());

    // Allocations take the clusters in order, first to last, as from a free list that held
    // them all: two clusters' worth of order-0 slots use clusters 0 and 1.
    let n = 2 * SLOTS_PER_CLUSTER;
    let entries: Vec<SwapEntry> = (0..n).map(|_| s.alloc(0, &mut |_| Word::zero(0, 1)).unwrap()).collect();
    let mut clusters: Vec<usize> = entries.iter().map(|e| e.cluster()).collect();
    clusters.dedup();
    assert_eq!(clusters, vec![0, 1]);
    assert_eq!(s.alloc_stats().free_clusters, s.nr_clusters() - 2);
    s.check_invariants().unwrap();

    // An entry in a cluster nobody used reads as free; freeing it is refused and makes that
    // cluster (and those before it) ready, on the free list, without breaking anything.
    let far = SwapEntry(slots - 1);
    assert_eq!(s.load(far).unwrap(), Word::FREE);
    assert!(s.lock_cluster(far).unwrap().free_range(far.offset(), 1).is_err());
    s.check_invariants().unwrap();
    assert_eq!(s.alloc_stats().free_clusters, s.nr_clusters() - 2);

    // Freed clusters come back after the never-used ones: the next cluster taken is 2.
    for e in &entries {
        s.lock_cluster(*e).unwrap().free_range(e.offset(), 1).unwrap();
    }
    let e = s.alloc(9, &mut |_| Word::zero(0, 1)).unwrap();
    assert_eq!(e.cluster(), 2);
    s.check_invariants().unwrap();
}
