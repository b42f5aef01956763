//! Readahead of random 4 KiB swap-ins from the swap file (`PagerConfig::file_readahead_pages`,
//! `fault::fill_ahead`): a fault maps the neighbours its read brings along, clean, and puts one
//! of them, the probe, into the swap cache, where a fault on it is a hit (`swap_ra_hit`);
//! readahead whose probes faults do not take stops (`AheadTracker`); every byte stays right,
//! through eviction too.
mod common;
use uswap_pager::{FaultMode, PagerConfig};

/// Pages of a readahead window.
const WINDOW: usize = 16;

/// A pager over a swap file alone (every stored page on it), 4 KiB folios, faults served by
/// the event thread as under `uswap run`; the sequential readahead of 4 KiB regions is off,
/// so what is read ahead is the file readahead's.
fn file_pager(dir: &std::path::Path, limit: u64) -> Option<std::sync::Arc<uswap_pager::Pager>> {
    common::pager(PagerConfig {
        limit_bytes: limit,
        folio_size: 4096,
        tiers: format!("zero,file:{}", dir.display()),
        fault_mode: FaultMode::Thread,
        readahead_pages: 0,
        file_readahead_pages: WINDOW,
        ..Default::default()
    })
}

/// A region of `len` bytes of random pages (`seed`), every page evicted to the file.
fn stored_region(p: &std::sync::Arc<uswap_pager::Pager>, len: usize, seed: u64) -> uswap_pager::Region {
    let mut r = p.map(len).unwrap();
    for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        common::fill_page(page, seed, pg, true);
    }
    r.evict_all();
    r
}

#[test]
fn a_file_swap_in_reads_its_window_into_the_swap_cache() {
    let dir = tempfile::tempdir().unwrap();
    let Some(p) = file_pager(dir.path(), 16 << 20) else { return };
    let r = stored_region(&p, 8 << 20, 3);
    assert_eq!(r.page_states()[4], r.len() / 4096, "every page stored: {:?}", r.page_states());
    // Windows in a scattered order; in each, one page first, then the rest of the window.
    let windows = r.len() / 4096 / WINDOW;
    for i in 0..windows {
        let w = (i * 7) % windows;
        for k in (3..WINDOW).chain(0..3) {
            let pg = w * WINDOW + k;
            assert_eq!(common::check_page(&r.as_slice()[pg * 4096..(pg + 1) * 4096], 3, pg, true), None, "page {pg}");
        }
    }
    let st = p.stats();
    // Pages evicted in one pass sit in adjacent slots: the first fault of a window reads the
    // others along and maps them, but for its probe, whose fault is a swap-cache hit; the
    // window's other pages take no fault.
    let w = windows as u64;
    assert!(st.swap_ra >= w * (WINDOW as u64 - 1) / 2, "too little read ahead: {st:?}");
    assert!(st.fault_swapin <= w + w / 4, "{} swap-in faults for {w} windows: {st:?}", st.fault_swapin);
    assert!(st.swap_ra_hit * 10 >= w * 9, "probes not taken from the swap cache: {st:?}");
    assert!(st.fault_cache >= st.swap_ra_hit, "hits that were not swap-cache faults: {st:?}");
    assert!(st.clean_kept >= st.swap_ra / 2, "pages read ahead not mapped clean: {st:?}");
    // Everything evicts again (the pages read ahead are clean: their entries were kept) and
    // reads back right.
    r.evict_all();
    for (pg, page) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(page, 3, pg, true), None, "page {pg} after eviction");
    }
    assert_eq!(p.stats().store_errors, 0);
}

#[test]
fn readahead_that_faults_do_not_use_stops() {
    let dir = tempfile::tempdir().unwrap();
    // A limit far below the region: what is read ahead is reclaimed long before a random
    // fault comes back to it.
    let Some(p) = file_pager(dir.path(), 4 << 20) else { return };
    let r = stored_region(&p, 32 << 20, 4);
    let pages = r.len() / 4096;
    let faults = 4000;
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..faults {
        x = common::mix64(x);
        let pg = (x as usize) % pages;
        assert_eq!(common::check_page(&r.as_slice()[pg * 4096..(pg + 1) * 4096], 4, pg, true), None, "page {pg}");
    }
    let st = p.stats();
    // Unchecked, every fault would read up to 15 pages ahead (60 000). Past its warm-up (64
    // probes), readahead whose probes go unused runs on one fault in 16.
    let unchecked = (faults * (WINDOW - 1)) as u64;
    assert!(st.swap_ra > 0, "no readahead at all: {st:?}");
    assert!(st.swap_ra < unchecked / 6, "readahead went on unused: {} of {unchecked}: {st:?}", st.swap_ra);
    for (pg, page) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(page, 4, pg, true), None, "page {pg}");
    }
    assert_eq!(p.stats().store_errors, 0);
}
