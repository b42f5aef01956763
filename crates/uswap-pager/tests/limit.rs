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
