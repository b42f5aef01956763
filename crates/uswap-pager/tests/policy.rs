//! Replacement: on a skewed access pattern (80 % of touches to 10 % of the pages) the
//! two-list policy (inactive list in the swap cache, refaults promote) takes fewer major
//! faults than FIFO. Deterministic: one thread, a fixed access sequence.
mod common;
use uswap_pager::{PagerConfig, Replacement};

fn majors(replacement: Replacement) -> Option<(u64, u64)> {
    let cfg =
        PagerConfig { limit_bytes: 4 << 20, folio_size: 4096, replacement, readahead_pages: 0, ..Default::default() };
    let p = common::pager(cfg)?;
    let mut r = p.map(16 << 20).unwrap();
    let pages = r.len() / 4096;
    for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        common::fill_page(page, 5, pg, false);
    }
    let before = p.stats();
    let mut x = 12345u64;
    let base = r.as_ptr();
    for _ in 0..pages * 3 {
        x = common::mix64(x);
        let pg = if x % 10 < 8 { (x >> 8) as usize % (pages / 10) } else { (x >> 8) as usize % pages };
        // SAFETY: inside the region.
        unsafe { std::ptr::read_volatile(base.add(pg * 4096 + 512)) };
    }
    let st = p.stats();
    for (pg, page) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(page, 5, pg, false), None, "page {pg}");
    }
    Some((st.fault_swapin - before.fault_swapin, st.fault_cache - before.fault_cache))
}

#[test]
fn two_lists_beat_fifo_on_a_skewed_pattern() {
    let Some((fifo, _)) = majors(Replacement::Fifo) else { return };
    let Some((two, cache_hits)) = majors(Replacement::TwoList) else { return };
    eprintln!("major faults: fifo {fifo}, two-list {two} (+{cache_hits} swap-cache refaults)");
    assert!(cache_hits > 0);
    assert!(two < fifo, "two-list {two} major faults, fifo {fifo}");
}
