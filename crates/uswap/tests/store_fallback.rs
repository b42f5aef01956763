//! A tier that fails is passed over: the next tier takes the page, a pool over its cap takes
//! it when every tier outside RAM failed, and a page no tier takes stays where it was (the
//! store returns the first failure and leaves no slot behind). Failures are counted by tier
//! and kind (`uswap::fails`).

mod vswap_common;

use proptest::prelude::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uswap::backend::{Backend, TierKind};
use uswap::fails::FailKind;
use uswap::vswap::{Engine, EngineConfig, Location};
use uswap::{SwapError, TierError, PAGE_SIZE};
use vswap_common::{make_data, TestBackend};

fn engine(tiers: &[Arc<TestBackend>]) -> Engine {
    let t: Vec<Arc<dyn Backend>> = tiers.iter().map(|t| t.clone() as Arc<dyn Backend>).collect();
    Engine::new(EngineConfig { virtual_slots: 4096, nr_groups: 2, ..EngineConfig::default() }, t).unwrap()
}

fn fail(t: &TestBackend, errno: i32) {
    t.fail_errno.store(errno, Ordering::SeqCst);
    t.fail_store.store(true, Ordering::SeqCst);
}

fn read_back(e: &Engine, entry: uswap::SwapEntry, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    e.swap_in(entry, &mut out, false).unwrap();
    out
}

#[test]
fn a_failing_tier_is_passed_over_for_the_next() {
    let file = Arc::new(TestBackend::new("file", TierKind::File, 0));
    let mem = Arc::new(TestBackend::new("mem", TierKind::Memory, 0));
    let e = engine(&[file.clone(), mem.clone()]);
    fail(&file, libc::EIO);
    let d = make_data(2, 7);
    let a = e.swap_out(0, &d).unwrap();
    assert_eq!(e.location(a).unwrap(), Location::Tier(1));
    assert_eq!(read_back(&e, a, d.len()), d);
    assert_eq!(e.stats().snapshot().swpout_tier_fallback, 4);
    let f = e.tier_fails(0).unwrap();
    assert_eq!((f.get(FailKind::Io), f.total(), f.errno), (1, 1, libc::EIO));
    assert_eq!(e.tier_fails(1).unwrap().total(), 0);
}

#[test]
fn a_full_file_sends_pages_to_the_pool_past_its_cap() {
    let pool = Arc::new(TestBackend::new("pool", TierKind::Pool, 0));
    let file = Arc::new(TestBackend::new("file", TierKind::File, 0));
    let e = engine(&[pool.clone(), file.clone()]);
    // A cap the first page fills: the next goes to the file while it works.
    e.groups().set_pool_max(0, PAGE_SIZE as u64).unwrap();
    let first = e.swap_out(0, &make_data(0, 3)).unwrap();
    let second = e.swap_out(0, &make_data(0, 4)).unwrap();
    assert_eq!((e.location(first).unwrap(), e.location(second).unwrap()), (Location::Tier(0), Location::Tier(1)));
    fail(&file, libc::ENOSPC);
    let d = make_data(0, 5);
    let third = e.swap_out(0, &d).unwrap();
    assert_eq!(e.location(third).unwrap(), Location::Tier(0), "past the cap, into the pool");
    assert_eq!(read_back(&e, third, PAGE_SIZE), d);
    let s = e.stats().snapshot();
    assert_eq!((s.zswpout_over_cap, s.swpout_rejected), (1, 0));
    assert_eq!(e.tier_fails(1).unwrap().get(FailKind::NoSpace), 1);
    // The file works again: the cap holds again.
    file.fail_store.store(false, Ordering::SeqCst);
    let fourth = e.swap_out(0, &make_data(0, 6)).unwrap();
    assert_eq!(e.location(fourth).unwrap(), Location::Tier(1));
}

#[test]
fn a_page_no_tier_takes_stays_with_the_caller_and_leaves_no_slot() {
    // A pool that holds one page and a swap file of one page.
    let pool = Arc::new(TestBackend::new("pool", TierKind::Pool, 1));
    let file = Arc::new(TestBackend::new("file", TierKind::File, 1));
    let e = engine(&[pool.clone(), file.clone()]);
    e.swap_out(0, &make_data(0, 3)).unwrap();
    e.swap_out(0, &make_data(0, 4)).unwrap();
    let used = e.space().used_slots();
    let r = e.swap_out(0, &make_data(0, 5));
    assert!(matches!(r, Err(SwapError::Tier(TierError::Reject))), "{r:?}");
    assert_eq!(e.space().used_slots(), used);
    assert_eq!(e.stats().snapshot().swpout_rejected, 1);
    assert_eq!(e.tier_fails(1).unwrap().get(FailKind::Full), 1, "a swap file at its size is full");
    assert_eq!(e.tier_fails(0).unwrap().total(), 0, "a pool declining a page is no failure");
    // A read-only file: the error says so, and is what the caller gets.
    let file2 = Arc::new(TestBackend::new("file", TierKind::File, 0));
    let e2 = engine(std::slice::from_ref(&file2));
    fail(&file2, libc::EROFS);
    let r = e2.swap_out(0, &make_data(0, 9));
    assert!(matches!(r, Err(SwapError::Tier(TierError::Io { errno: libc::EROFS, .. }))), "{r:?}");
    assert_eq!(e2.tier_fails(0).unwrap().get(FailKind::ReadOnly), 1);
    assert_eq!(e2.space().used_slots(), 0);
}

proptest! {
    /// Against a model (a map of what was stored): whatever the tiers do, every swap-out that
    /// succeeded reads back exactly, and every one that failed left no slot behind.
    #[test]
    fn no_page_is_lost_while_tiers_fail(ops in prop::collection::vec((0u8..4, 0u8..3, 1u64..1000), 1..120)) {
        let pool = Arc::new(TestBackend::new("pool", TierKind::Pool, 24));
        let file = Arc::new(TestBackend::new("file", TierKind::File, 40));
        let e = engine(&[pool.clone(), file.clone()]);
        e.groups().set_pool_max(0, 8 * PAGE_SIZE as u64).unwrap();
        let mut model = Vec::new();
        for (what, order, seed) in ops {
            match what {
                0 => fail(&file, libc::ENOSPC),
                1 => file.fail_store.store(false, Ordering::SeqCst),
                _ => {
                    let d = make_data(order, seed);
                    let used = e.space().used_slots();
                    match e.swap_out(0, &d) {
                        Ok(a) => model.push((a, d)),
                        Err(_) => prop_assert_eq!(e.space().used_slots(), used),
                    }
                }
            }
        }
        for (a, d) in &model {
            prop_assert_eq!(&read_back(&e, *a, d.len()), d);
        }
    }
}

#[test]
fn a_large_folio_a_file_cannot_place_is_split_not_failed() {
    // A file with room for two pages: a 4-page folio does not fit, single pages do.
    let file = Arc::new(TestBackend::new("file", TierKind::File, 2));
    let e = engine(std::slice::from_ref(&file));
    let r = e.swap_out(0, &make_data(2, 3));
    assert!(matches!(r, Err(SwapError::NoSpace { order: 2 })), "{r:?}");
    assert_eq!(e.space().used_slots(), 0);
    assert_eq!(e.tier_fails(0).unwrap().total(), 0, "no contiguous range is no failure");
    let d = make_data(0, 4);
    let a = e.swap_out(0, &d).unwrap();
    assert_eq!(read_back(&e, a, PAGE_SIZE), d);
}
