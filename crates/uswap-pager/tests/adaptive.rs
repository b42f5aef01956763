//! Adaptive swap-in granularity of large stored folios (`PagerConfig::adaptive`): random faults
//! take only the faulting page, even when an object straddles two pages and faults twice in a
//! row; a sequential stream of faults takes whole folios. The same holds for the 4 KiB stored
//! pages of a large-folio region (what is left after folios were swapped in page by page).
mod common;
use uswap_pager::{PagerConfig, PagerStats};

const FOLIO: usize = 65536;
const PER_FOLIO: usize = FOLIO / 4096;

fn whole(st: &PagerStats) -> u64 {
    st.swpin[4]
}

/// A pager with `limit` and 64 KiB folios, and a 4 MiB region of pattern pages all evicted
/// (whole folios in the store).
fn evicted(limit: u64) -> Option<(std::sync::Arc<uswap_pager::Pager>, uswap_pager::Region)> {
    let cfg = PagerConfig { limit_bytes: limit, folio_size: FOLIO, ..Default::default() };
    let p = common::pager(cfg)?;
    let mut r = p.map(4 << 20).unwrap();
    for (pg, pgbuf) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        common::fill_page(pgbuf, 6, pg, false);
    }
    r.evict_all();
    Some((p, r))
}

#[test]
fn straddling_reads_take_single_pages_and_streams_take_whole_folios() {
    let Some((p, r)) = evicted(4 << 20) else { return };
    let folios = r.len() / FOLIO;
    // Random access to objects that straddle a page boundary: pages 5 and 6 of folios 7 apart
    // (no folio follows the one before).
    let base = whole(&p.stats());
    for i in 0..folios {
        let f = (i * 7) % folios;
        for pg in [f * PER_FOLIO + 5, f * PER_FOLIO + 6] {
            assert_eq!(common::check_page(&r.as_slice()[pg * 4096..(pg + 1) * 4096], 6, pg, false), None, "page {pg}");
        }
    }
    let st = p.stats();
    assert_eq!(whole(&st) - base, 0, "a straddling read swapped a whole folio in: {st:?}");
    assert_eq!(r.page_states()[1], 2 * folios, "two pages per folio resident: {:?}", r.page_states());
    // A stream: every page in order. After its first steps, every folio comes in whole.
    r.evict_all();
    let base = whole(&p.stats());
    for (pg, pgbuf) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(pgbuf, 6, pg, false), None, "page {pg}");
    }
    let st = p.stats();
    assert!(
        whole(&st) - base >= (folios - 1) as u64,
        "a stream took {} of {folios} folios whole: {st:?}",
        whole(&st) - base
    );
}

#[test]
fn faults_in_neighbouring_folios_take_single_4k_pages_and_streams_take_whole_folios() {
    let Some((p, mut r)) = evicted(16 << 20) else { return };
    let folios = r.len() / FOLIO;
    // Rewrite the even pages one by one, no two faults in a row in the same or neighbouring
    // folios: each comes in alone, and the next eviction stores them as 4 KiB pages.
    for j in (0..PER_FOLIO).step_by(2) {
        for i in 0..folios {
            let pg = (i * 7) % folios * PER_FOLIO + j;
            common::fill_page(&mut r.as_mut_slice()[pg * 4096..(pg + 1) * 4096], 6, pg, false);
        }
    }
    r.evict_all();
    let check = |r: &uswap_pager::Region, pg: usize| {
        assert_eq!(common::check_page(&r.as_slice()[pg * 4096..(pg + 1) * 4096], 6, pg, false), None, "page {pg}");
    };
    // Random pairs of neighbouring folios (an entry, then the key it points to, allocated
    // next to it): one sequential step each, which is not a stream.
    for i in 0..folios / 2 {
        let f = 2 * ((i * 7) % (folios / 2));
        check(&r, f * PER_FOLIO);
        check(&r, (f + 1) * PER_FOLIO);
    }
    assert_eq!(r.page_states()[1], folios, "one page per folio resident: {:?} {:?}", r.page_states(), p.stats());
    // A stream: every page in order. After its first steps, every folio comes in whole.
    r.evict_all();
    for pg in 0..r.len() / 4096 {
        check(&r, pg);
    }
    let st = p.stats();
    assert!(st.swpin[0] > 0, "the even pages were stored as 4 KiB pages: {st:?}");
    let resident = r.page_states()[1];
    assert!(resident >= (folios - 1) * PER_FOLIO, "a stream left {resident} pages resident: {st:?}");
}
