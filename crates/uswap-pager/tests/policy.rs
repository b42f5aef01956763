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
    eprintln!("{replacement:?}: {st:?}");
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

/// Swap-ins (from the store or the swap cache) per step of a stream over cold pages with a
/// hot set read round-robin alongside it, four hot pages per cold page (with `protect`).
fn hot_and_stream(protect: bool) -> Option<f64> {
    let cfg = PagerConfig { limit_bytes: 16 << 20, folio_size: 4096, readahead_pages: 0, ..Default::default() };
    let p = common::pager(cfg)?;
    let mut r = p.map(64 << 20).unwrap();
    let pages = r.len() / 4096;
    // A hot set of 4 MiB: a quarter of the limit, each page read every 256 steps.
    let hot = 1024;
    for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        common::fill_page(page, 9, pg, false);
    }
    let base = r.as_ptr();
    let read = |pg: usize| {
        // SAFETY: inside the region.
        unsafe { std::ptr::read_volatile(base.add(pg * 4096 + 64)) };
    };
    let steps = 3 * (pages - hot);
    let mut swapins = 0;
    for pass in 0..2 {
        let before = p.stats();
        for i in 0..steps {
            read(hot + i % (pages - hot));
            if protect {
                for k in 0..4 {
                    read((4 * i + k) % hot);
                }
            }
        }
        let st = p.stats();
        // The first pass warms up: the hot set is swapped out by the fill.
        if pass == 1 {
            swapins = st.fault_swapin + st.fault_cache - before.fault_swapin - before.fault_cache;
            eprintln!("hot set alongside a stream: {swapins} swap-ins in {steps} steps; {st:?}");
        }
    }
    for (pg, page) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(page, 9, pg, false), None, "page {pg}");
    }
    Some(swapins as f64 / steps as f64)
}

/// The protected list: without accessed bits, a FIFO evicts a hot page once per turn of the
/// resident pages however often it is read, and the stream's pages push it out. A hot page
/// refaults at a short distance and goes onto the protected list, which the stream's pages
/// (refaulting a whole region later) never reach; so the hot set stays resident and the
/// swap-ins are the stream's own: about as many per step as for the stream alone, where a
/// policy that queued every folio on the active list would swap in the hot set too.
#[test]
fn a_hot_set_stays_resident_alongside_a_stream() {
    let Some(alone) = hot_and_stream(false) else { return };
    let Some(with_hot) = hot_and_stream(true) else { return };
    eprintln!("swap-ins per step: stream alone {alone:.3}, with the hot set {with_hot:.3}");
    assert!(alone > 0.9, "the stream must swap in at every step ({alone:.3} per step)");
    assert!(
        with_hot < alone * 1.15,
        "the hot set is swapped in again and again: {with_hot:.3} swap-ins per step against {alone:.3} for the stream alone"
    );
}
