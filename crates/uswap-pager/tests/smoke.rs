//! Basic paging: write 4x the limit, read it back.
mod common;
use uswap_pager::PagerConfig;

fn roundtrip(folio: usize) {
    let Some(p) = common::pager(PagerConfig { limit_bytes: 8 << 20, folio_size: folio, ..Default::default() }) else {
        return;
    };
    let mut r = p.map(32 << 20).unwrap();
    let s = r.as_mut_slice();
    for (pg, page) in s.chunks_mut(4096).enumerate() {
        common::fill_page(page, 1, pg);
    }
    let st = p.stats();
    assert!(st.charged_bytes <= st.limit_bytes + folio as u64, "{st:?}");
    assert!(st.evicted_pages > 0);
    for (pg, page) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(page, 1, pg), None, "page {pg}");
    }
    let st = p.stats();
    eprintln!("{}", serde_json::to_string(&st).unwrap());
    assert!(st.fault_swapin > 0);
}

#[test]
fn roundtrip_4k() {
    roundtrip(4096);
}
#[test]
fn roundtrip_64k() {
    roundtrip(65536);
}
#[test]
fn roundtrip_2m() {
    roundtrip(2 << 20);
}
