//! The limit (resident + swap cache + pool) holds for incompressible data when a file tier
//! takes what the capped pool cannot; with RAM-only tiers the pager says it is not capped.
mod common;
use uswap_pager::PagerConfig;

#[test]
fn incompressible_data_stays_under_the_limit_with_a_file_tier() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = format!("zero,lz4,file:{}", dir.path().display());
    let limit = 8u64 << 20;
    let Some(p) = common::pager(PagerConfig { limit_bytes: limit, folio_size: 65536, tiers, ..Default::default() })
    else {
        return;
    };
    assert!(p.stats().pool_capped);
    let mut r = p.map(32 << 20).unwrap();
    let mut max_charged = 0;
    for round in 0..2u64 {
        for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
            common::fill_page(page, round, pg, pg % 4 != 0);
            if pg % 256 == 0 {
                max_charged = max_charged.max(p.charged_bytes());
            }
        }
    }
    let st = p.stats();
    assert!(max_charged <= limit + (1 << 20), "charged {max_charged} over the limit {limit}: {st:?}");
    assert_eq!(st.store_errors, 0, "{st:?}");
    for (pg, page) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(page, 1, pg, pg % 4 != 0), None, "page {pg}");
    }
    assert!(p.charged_bytes() <= limit + (1 << 20), "{:?}", p.stats());
}

#[test]
fn ram_only_tiers_are_not_capped() {
    let cfg = PagerConfig { limit_bytes: 8 << 20, tiers: "zero,lz4".into(), ..Default::default() };
    let Some(p) = common::pager(cfg) else { return };
    assert!(!p.stats().pool_capped);
}

#[test]
fn the_default_tiers_have_a_file_so_the_limit_can_hold() {
    let Some(p) = common::pager(PagerConfig { limit_bytes: 8 << 20, ..Default::default() }) else { return };
    assert!(p.stats().pool_capped);
}

/// Memory outside the pager counts against the limit (as a cgroup counts all of a process's
/// anonymous memory): told of it, the pager pushes its own pages out to make room, down to a
/// quarter of the budget and no further; told it is gone, it grows back. Every byte stays right.
#[test]
fn memory_outside_the_pager_makes_it_shrink_to_make_room() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = format!("zero,lz4,file:{}", dir.path().display());
    let limit = 16u64 << 20;
    // As under `uswap run`: faults served by the event thread, a background reclaimer (which
    // also writes back what the pool holds over its lowered cap).
    let cfg = PagerConfig {
        limit_bytes: limit,
        folio_size: 65536,
        tiers,
        fault_mode: uswap_pager::FaultMode::Thread,
        ..Default::default()
    };
    let Some(p) = common::pager(cfg) else {
        return;
    };
    let mut r = p.map(32 << 20).unwrap();
    let touch = |r: &mut uswap_pager::Region, round: u64| {
        for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
            common::fill_page(page, round, pg, true);
        }
    };
    touch(&mut r, 0);
    let settle = |want: u64| {
        let t = std::time::Instant::now();
        while p.charged_bytes() > want + (1 << 20) && t.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        p.charged_bytes()
    };
    assert!(p.charged_bytes() > limit / 2, "the region fills the limit: {:?}", p.stats());
    // 10 MiB outside: the pager keeps to 6 MiB.
    assert_eq!(p.set_outside(10 << 20), 6 << 20);
    assert_eq!((p.budget(), p.limit(), p.stats().outside_bytes), (limit, 6 << 20, 10 << 20));
    let c = settle(6 << 20);
    assert!(c <= (6 << 20) + (1 << 20), "charged {c} with 10 MiB outside a 16 MiB limit: {:?}", p.stats());
    // Writing the whole region again keeps to it too.
    touch(&mut r, 1);
    let c = settle(6 << 20);
    assert!(c <= (6 << 20) + (1 << 20), "charged {c} after a pass: {:?}", p.stats());
    // More than three quarters outside: the pager keeps a quarter of the budget.
    assert_eq!(p.set_outside(15 << 20), limit / 4);
    // Gone again: the whole budget, and a pass over the region fills it.
    assert_eq!(p.set_outside(0), limit);
    touch(&mut r, 2);
    assert!(p.charged_bytes() > limit / 2, "the pager grew back: {:?}", p.stats());
    for (pg, page) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(page, 2, pg, true), None, "page {pg}");
    }
    assert_eq!(p.stats().store_errors, 0);
}
