//! Engine API edges: bad input returns errors (never panics, never changes state), group
//! charging follows the data between tiers, statistics use the kernel's names.

mod vswap_common;

use std::sync::Arc;
use uswap::backend::{Backend, TierKind};
use uswap::vswap::{Engine, EngineConfig, Location};
use uswap::{SwapEntry, SwapError, TierError, PAGE_SIZE};
use vswap_common::{make_data, TestBackend};

fn engine(tiers: &[Arc<TestBackend>], slots: u64) -> Engine {
    let t: Vec<Arc<dyn Backend>> = tiers.iter().map(|t| t.clone() as Arc<dyn Backend>).collect();
    Engine::new(EngineConfig { virtual_slots: slots, nr_groups: 4, ..EngineConfig::default() }, t).unwrap()
}

#[test]
fn bad_input_is_an_error() {
    let pool = Arc::new(TestBackend::new("pool", TierKind::Pool, 0));
    let e = engine(std::slice::from_ref(&pool), 1024);
    let d = make_data(0, 3);
    // Wrong lengths.
    assert!(matches!(e.swap_out(0, &d[..100]), Err(SwapError::BadLength { .. })));
    assert!(matches!(e.swap_out(0, &vec![1u8; 3 * PAGE_SIZE]), Err(SwapError::BadLength { .. })));
    assert!(matches!(e.swap_out(0, &[]), Err(SwapError::BadLength { .. })));
    assert!(e.swap_out(9, &d).is_err(), "unknown group");
    let a = e.swap_out(0, &d).unwrap();
    let mut small = vec![0u8; 100];
    assert!(matches!(e.swap_in(a, &mut small, false), Err(SwapError::BadLength { .. })));
    // Out of range.
    let mut out = vec![0u8; PAGE_SIZE];
    assert!(matches!(e.swap_in(SwapEntry(1 << 40), &mut out, false), Err(SwapError::OutOfRange(_))));
    assert!(matches!(e.put(SwapEntry(1 << 40), 1), Err(SwapError::OutOfRange(_))));
    assert!(matches!(e.dup(SwapEntry(1 << 40), 1), Err(SwapError::OutOfRange(_))));
    assert!(e.move_entry(SwapEntry(1 << 40), 0).is_err());
    assert!(e.move_entry(a, 5).is_err());
    assert!(e.writeback(0, 5, 1).is_err());
    assert!(e.drain_tier(5).is_err());
    // Ranges crossing a cluster, zero-length, misaligned folio.
    assert!(e.put(SwapEntry(511), 2).is_err());
    assert!(e.put(a, 0).is_err());
    let mut two = vec![0u8; 2 * PAGE_SIZE];
    assert!(matches!(e.swap_in(SwapEntry(a.0 | 1), &mut two, false), Err(SwapError::BadFolio { .. })));
    // Free slots, double put: errors, state unchanged.
    let free = SwapEntry(a.0 + 1);
    assert!(matches!(e.swap_in(free, &mut out, false), Err(SwapError::NotInUse(_))));
    assert!(matches!(e.put(free, 1), Err(SwapError::NotInUse(_))));
    assert!(e.put(a, 2).is_err(), "all or nothing: the second slot is free");
    assert_eq!(e.count(a).unwrap(), 1);
    e.swap_in(a, &mut out, true).unwrap();
    assert_eq!(out, d);
    assert!(matches!(e.put(a, 1), Err(SwapError::NotInUse(_))), "double free");
    assert!(matches!(e.dup(a, 1), Err(SwapError::NotInUse(_))));
    assert_eq!(e.space().used_slots(), 0);
    assert_eq!(pool.usage().stored_pages, 0);
}

#[test]
fn counts_survive_many_dups() {
    let pool = Arc::new(TestBackend::new("pool", TierKind::Pool, 0));
    let e = engine(std::slice::from_ref(&pool), 1024);
    let d = make_data(1, 9);
    let a = e.swap_out(0, &d).unwrap();
    for _ in 0..40 {
        e.dup(a, 2).unwrap();
    }
    assert_eq!(e.count(a).unwrap(), 41);
    let mut out = vec![0u8; 2 * PAGE_SIZE];
    for _ in 0..41 {
        e.swap_in(a, &mut out, true).unwrap();
        assert_eq!(out, d);
    }
    assert_eq!(e.space().used_slots(), 0);
    assert_eq!(pool.usage().stored_pages, 0);
}

#[test]
fn swap_is_charged_only_on_file_tiers_and_stats_have_kernel_names() {
    let pool = Arc::new(TestBackend::new("pool", TierKind::Pool, 4));
    let file = Arc::new(TestBackend::new("file", TierKind::File, 0));
    let e = engine(&[pool.clone(), file.clone()], 4096);
    e.groups().set_swap_max(1, 6).unwrap();
    let zero = vec![0u8; PAGE_SIZE << 2];
    let z = e.swap_out(1, &zero).unwrap();
    let mut ents = Vec::new();
    for i in 0..4 {
        ents.push((e.swap_out(1, &make_data(0, 10 + i)).unwrap(), make_data(0, 10 + i)));
    }
    let u = e.groups().usage(1).unwrap();
    assert_eq!((u.swap_pages, u.pool_bytes, u.swapped_pages), (0, 4 * PAGE_SIZE as u64, 8));
    // The pool is full: the next pages go to the file, charged as swap, up to swap_max.
    let big = make_data(2, 77);
    let b = e.swap_out(1, &big).unwrap();
    assert_eq!(e.location(b).unwrap(), Location::Tier(1));
    assert_eq!(e.groups().usage(1).unwrap().swap_pages, 4);
    assert!(matches!(e.swap_out(1, &make_data(2, 78)), Err(SwapError::GroupLimit(1))));
    assert_eq!(e.space().used_slots(), 12, "a refused store frees its slots");
    // Writeback: REF is set at store, so the first pass only clears it; 2 pages fit the limit.
    let moved = e.writeback(0, 1, 2).unwrap();
    assert_eq!(moved, 2);
    assert_eq!(e.groups().usage(1).unwrap().swap_pages, 6);
    assert_eq!(e.groups().usage(1).unwrap().pool_bytes, 2 * PAGE_SIZE as u64);
    // Over the limit: writeback stops without losing anything.
    assert_eq!(e.writeback(0, 1, 10).unwrap(), 0);
    // Drain the file into the pool (full) -> memory (resident folios): swap uncharged.
    e.drain_tier(1).unwrap();
    assert_eq!(file.usage().stored_pages, 0);
    assert_eq!(e.groups().usage(1).unwrap().swap_pages, 0);
    assert_eq!(e.location(b).unwrap(), Location::Cache);
    let s = e.stats().snapshot();
    assert_eq!(s.swpout_zero, 4);
    assert_eq!(s.zswpout, 4 + 2, "4 at swap-out, 2 back from the drained file");
    assert_eq!(s.pswpout, 4 + 2);
    assert_eq!(s.zswpwb, 2);
    assert_eq!(s.swpout[0], 4);
    assert_eq!(s.swpout[2], 2);
    // Read everything back.
    let mut out4 = vec![1u8; PAGE_SIZE << 2];
    e.swap_in(z, &mut out4, true).unwrap();
    assert_eq!(out4, zero);
    e.swap_in(b, &mut out4, true).unwrap();
    assert_eq!(out4, big);
    let mut out = vec![0u8; PAGE_SIZE];
    for (a, d) in &ents {
        e.swap_in(*a, &mut out, true).unwrap();
        assert_eq!(&out, d);
    }
    let s = e.stats().snapshot();
    assert_eq!(s.swpin_zero, 4);
    assert_eq!(s.swpin[2], 2);
    assert_eq!(
        e.groups().usage(1).unwrap(),
        uswap::internals::group::GroupUsage { swap_max: 6, pool_max: u64::MAX, ..Default::default() }
    );
    assert_eq!(e.space().used_slots(), 0);
    assert_eq!(e.cache().nr_cached(), 0);
    assert_eq!(pool.usage().stored_pages + file.usage().stored_pages, 0);
}

#[test]
fn large_folio_partial_swap_in_and_fallback() {
    let pool = Arc::new(TestBackend::new("pool", TierKind::Pool, 0));
    let e = engine(std::slice::from_ref(&pool), 1024);
    let d = make_data(3, 5);
    let a = e.swap_out(0, &d).unwrap();
    // One page of the middle, exclusively: the object stays until all its pages are gone.
    let mut out = vec![0u8; PAGE_SIZE];
    e.swap_in(SwapEntry(a.0 + 5), &mut out, true).unwrap();
    assert_eq!(out, d[5 * PAGE_SIZE..6 * PAGE_SIZE]);
    assert_eq!(pool.usage().stored_pages, 8);
    // A 16-page range over this object and its zero neighbour: split (swpin_fallback).
    let z = e.swap_out(0, &vec![0u8; PAGE_SIZE << 3]).unwrap();
    assert_eq!(z.0, a.0 + 8, "the allocator fills a cluster in order");
    {
        let mut out16 = vec![0u8; PAGE_SIZE << 4];
        e.swap_in(a, &mut out16, false).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(out16[..8 * PAGE_SIZE], d[..]);
        assert!(out16[8 * PAGE_SIZE..].iter().all(|&b| b == 0));
        assert!(e.stats().snapshot().swpin_fallback[4] >= 1);
    }
    e.put(z, 8).unwrap();
    e.put(a, 5).unwrap();
    e.put(SwapEntry(a.0 + 6), 2).unwrap();
    assert_eq!(e.space().used_slots(), 0);
    assert_eq!(pool.usage().stored_pages, 0);
    // A failing store leaves nothing behind; a failing load leaves the page readable.
    pool.fail_store.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(matches!(e.swap_out(0, &d), Err(SwapError::Tier(TierError::Io { .. }))));
    pool.fail_store.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(e.space().used_slots(), 0);
    let a = e.swap_out(0, &d).unwrap();
    pool.fail_load.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut out8 = vec![0u8; PAGE_SIZE << 3];
    assert!(e.swap_in(a, &mut out8, true).is_err());
    pool.fail_load.store(false, std::sync::atomic::Ordering::SeqCst);
    e.swap_in(a, &mut out8, true).unwrap();
    assert_eq!(out8, d);
    assert_eq!(e.space().used_slots(), 0);
}
