//! Evictions racing writes: several threads rewrite and check their pages (interleaved, so
//! threads share folios) while the pager evicts under its limit and another thread keeps
//! evicting the whole region. Every byte is checked after every round and at the end.
mod common;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use uswap_pager::{PagerConfig, Replacement};

fn hammer(folio: usize, replacement: Replacement) {
    let cfg =
        PagerConfig { limit_bytes: 2 << 20, folio_size: folio, replacement, reclaim_batch: 64, ..Default::default() };
    let Some(p) = common::pager(cfg) else { return };
    let r = Arc::new(p.map(8 << 20).unwrap());
    let pages = r.len() / 4096;
    let threads = 4;
    let rounds = 4u64;
    let stop = Arc::new(AtomicBool::new(false));
    let evictor = {
        let (r, stop) = (r.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += r.evict_all();
            }
            n
        })
    };
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                let base = r.as_ptr() as usize;
                for round in 0..rounds {
                    for pg in (t..pages).step_by(threads) {
                        // SAFETY: page pg is written only by this thread; the region lives.
                        let page = unsafe { std::slice::from_raw_parts_mut((base + pg * 4096) as *mut u8, 4096) };
                        if round > 0 {
                            assert_eq!(common::check_page(page, round - 1, pg, false), None, "page {pg} round {round}");
                        }
                        // Write word by word so evictions land in the middle of a page write.
                        for (i, c) in page.chunks_exact_mut(8).enumerate() {
                            c.copy_from_slice(&common::word(round, pg, i, false).to_le_bytes());
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let evicted = evictor.join().unwrap();
    for (pg, page) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(page, rounds - 1, pg, false), None, "page {pg} at the end");
    }
    let st = p.stats();
    eprintln!("folio {folio}: evicted by the evictor thread {evicted}, waits {}, {st:?}", st.fault_waits);
    assert!(st.evicted_pages > 0 && evicted > 0);
}

#[test]
fn writes_race_evictions_4k() {
    hammer(4096, Replacement::TwoList);
}

#[test]
fn writes_race_evictions_64k() {
    hammer(65536, Replacement::TwoList);
}

#[test]
fn writes_race_evictions_64k_fifo() {
    hammer(65536, Replacement::Fifo);
}

/// Fill 4x the limit from several threads with patterned and random data, verify, evict all,
/// verify again.
#[test]
fn fill_four_times_the_limit_from_threads() {
    let Some(p) = common::pager(PagerConfig { limit_bytes: 4 << 20, folio_size: 65536, ..Default::default() }) else {
        return;
    };
    let r = Arc::new(p.map(16 << 20).unwrap());
    let pages = r.len() / 4096;
    let threads = 4;
    let per = pages / threads;
    let check_all = |r: &Arc<uswap_pager::Region>| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for pg in t * per..(t + 1) * per {
                        let page = &r.as_slice()[pg * 4096..(pg + 1) * 4096];
                        assert_eq!(common::check_page(page, 7, pg, t % 2 == 1), None, "page {pg}");
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    };
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                let base = r.as_ptr() as usize;
                for pg in t * per..(t + 1) * per {
                    // SAFETY: each thread writes its own quarter.
                    let page = unsafe { std::slice::from_raw_parts_mut((base + pg * 4096) as *mut u8, 4096) };
                    common::fill_page(page, 7, pg, t % 2 == 1);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    check_all(&r);
    r.evict_all();
    check_all(&r);
    let st = p.stats();
    assert!(st.evicted_pages >= pages as u64, "{st:?}");
}
