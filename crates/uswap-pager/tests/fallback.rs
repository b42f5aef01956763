//! Large folios under a fragmented swap space: stores of 64 KiB folios find no contiguous
//! range, split down to 4 KiB (swpout_fallback), and every byte still comes back.
mod common;
use common::lz4store::Lz4Store;
use std::sync::Arc;
use uswap_pager::{PageStore, Pager, PagerConfig, StoreError};

#[test]
fn large_folios_fall_back_when_the_space_is_fragmented() {
    // 4096 slots (16 MiB of swap); fill with single pages and free every other one, so the
    // free space is 2048 isolated slots.
    let store = Arc::new(Lz4Store::new(4096, 64 << 20, true).unwrap());
    let page = vec![0x5au8; 4096];
    let held: Vec<u64> = (0..4096).map(|_| store.store(0, &page).unwrap()).collect();
    for e in held.iter().step_by(2) {
        store.put(*e, 1);
    }
    assert_eq!(store.store(0, &vec![1u8; 65536]), Err(StoreError::NoSpace { order: 4 }));
    let cfg = PagerConfig { limit_bytes: 2 << 20, folio_size: 65536, ..Default::default() };
    let Some(p) = common::check(Pager::with_store(cfg, Some(Box::new(store.clone())))) else { return };
    let mut r = p.map(6 << 20).unwrap();
    for (pg, pgbuf) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        common::fill_page(pgbuf, 3, pg, false);
    }
    r.evict_all();
    for (pg, pgbuf) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(pgbuf, 3, pg, false), None, "page {pg}");
    }
    let st = p.stats();
    eprintln!("{st:?}");
    assert!(st.swpout_fallback[4] > 0, "{st:?}");
    assert!(st.swpout[0] > 0, "{st:?}");
    drop(r);
    // Only the test's own pages are left in the store.
    assert_eq!(p.stats().engine.stored_pages, 2048);
}

#[test]
fn swapin_never_brings_in_single_pages() {
    let cfg = PagerConfig {
        limit_bytes: 4 << 20,
        folio_size: 65536,
        swapin: uswap_pager::SwapinPolicy::Never,
        ..Default::default()
    };
    let Some(p) = common::pager(cfg) else { return };
    let mut r = p.map(4 << 20).unwrap();
    for (pg, pgbuf) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        common::fill_page(pgbuf, 4, pg, false);
    }
    r.evict_all();
    // Touch one page per folio.
    for f in 0..r.len() / 65536 {
        let pg = f * 16 + 5;
        assert_eq!(common::check_page(&r.as_slice()[pg * 4096..(pg + 1) * 4096], 4, pg, false), None);
    }
    let st = p.stats();
    assert_eq!(st.swpin_fallback[4], (r.len() / 65536) as u64, "{st:?}");
    assert_eq!(st.swpin[4], 0, "{st:?}");
    let s = r.page_states();
    assert_eq!(s[1], r.len() / 65536, "one page per folio resident: {s:?}");
    // The rest still reads back right (page by page).
    for (pg, pgbuf) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(pgbuf, 4, pg, false), None, "page {pg}");
    }
}
