//! Clean pages: a page swapped in by a read keeps its swap entry and is mapped write-protected
//! (`CLEAN`), so evicting it again writes nothing. These tests check that no write to such a
//! page is ever lost (the write-protect fault frees the entry first), that a page the program
//! drops is not brought back from its stale entry, and that no entry leaks. Each runs in both
//! fault modes: in thread mode (`uswap run`) the write-protect fault is a message to the event
//! thread, which must free the entry before it lets the write through.

mod common;

use common::{check_page, fill_page, mix64, pager};
use std::sync::atomic::{AtomicBool, Ordering};
use uswap_pager::{FaultMode, PagerConfig, PAGE_SIZE};

/// Every (fault mode, folio size) pair the tests run.
const CASES: [(FaultMode, usize); 4] =
    [(FaultMode::Sigbus, 4096), (FaultMode::Sigbus, 65536), (FaultMode::Thread, 4096), (FaultMode::Thread, 65536)];

fn cfg(mode: FaultMode, folio: usize) -> PagerConfig {
    PagerConfig {
        limit_bytes: 4 << 20,
        folio_size: folio,
        fault_mode: mode,
        reclaim: common::reclaim_for(mode),
        tiers: "zero,lz4".into(),
        ..Default::default()
    }
}

fn page(r: &mut uswap_pager::Region, pg: usize) -> &mut [u8] {
    &mut r.as_mut_slice()[pg * PAGE_SIZE..(pg + 1) * PAGE_SIZE]
}

/// Poll `done` every millisecond for up to a second; panic with `what` and the region's page
/// states if it never holds.
fn wait_until(r: &uswap_pager::Region, what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("{what}: {:?}", r.page_states());
}

/// Evict the whole region, again until nothing is resident: in thread mode the background
/// reclaimer may hold a page (`BUSY`) while `evict_all` passes it.
fn evict_everything(r: &uswap_pager::Region) {
    wait_until(r, "pages stay resident after evict_all", || {
        r.evict_all();
        let st = r.page_states();
        st[1] + st[2] + st[3] == 0
    });
}

/// Wait until no page of the region is `BUSY`: in thread mode the event thread's copy wakes
/// the faulting thread before the event thread publishes the page's new word.
fn settle(r: &uswap_pager::Region) {
    wait_until(r, "pages stay BUSY", || r.page_states()[2] == 0);
}

fn stored_pages(p: &uswap_pager::Pager) -> u64 {
    p.stats().engine.stored_pages
}

/// Read passes keep entries and evict without storing again; then writes after reads (each
/// page read first, so it is CLEAN when written) keep every byte; a dropped region leaves
/// nothing in the store.
#[test]
fn reads_keep_entries_and_writes_after_reads_are_never_lost() {
    for (mode, folio) in CASES {
        let Some(p) = pager(cfg(mode, folio)) else { return };
        let pages = (16 << 20) / PAGE_SIZE;
        let mut r = p.map(pages * PAGE_SIZE).unwrap();
        for pg in 0..pages {
            fill_page(page(&mut r, pg), 1, pg, false);
        }
        let stored_before = p.stats().evicted_pages;
        // Random reads: every page swapped in by a read, most evicted again.
        for k in 0..pages * 2 {
            let pg = (mix64(k as u64) % pages as u64) as usize;
            assert_eq!(check_page(page(&mut r, pg), 1, pg, false), None, "{mode:?} folio {folio} page {pg}");
        }
        let s = p.stats();
        assert!(s.clean_kept > pages as u64 / 2, "{mode:?} folio {folio}: clean_kept {}", s.clean_kept);
        assert!(s.clean_evicted > pages as u64 / 2, "{mode:?} folio {folio}: clean_evicted {}", s.clean_evicted);
        // Only the pages dirty when the pass began (at most the limit's worth) are stored again;
        // without clean pages it would be nearly every read.
        assert!(
            s.evicted_pages - stored_before < pages as u64 / 2,
            "{mode:?} folio {folio}: clean evictions stored again ({} pages)",
            s.evicted_pages - stored_before
        );
        eprintln!(
            "{mode:?} folio {folio}: {} entries for {pages} pages, pool {}",
            stored_pages(&p),
            p.stats().pool_bytes
        );
        // Read then write each page (read-modify-write), in a scattered order.
        for k in 0..pages {
            let pg = (k * 7919) % pages;
            let pg_ref = page(&mut r, pg);
            assert_eq!(check_page(pg_ref, 1, pg, false), None);
            fill_page(pg_ref, 2, pg, false);
        }
        for k in 0..pages * 2 {
            let pg = (mix64(k as u64 ^ 99) % pages as u64) as usize;
            assert_eq!(
                check_page(page(&mut r, pg), 2, pg, false),
                None,
                "{mode:?} folio {folio} page {pg} after rewrite"
            );
        }
        assert!(p.stats().clean_dirtied > 0);
        drop(r);
        assert_eq!(stored_pages(&p), 0, "{mode:?} folio {folio}: entries left after the region went");
        assert_eq!(p.stats().resident_bytes, 0, "{mode:?} folio {folio}");
    }
}

/// A clean page the program drops (`madvise(MADV_DONTNEED)`, no REMOVE events) reads as zero,
/// whether it is evicted before the next access or not.
#[test]
fn a_dropped_clean_page_reads_as_zero() {
    for mode in [FaultMode::Sigbus, FaultMode::Thread] {
        let Some(p) = pager(cfg(mode, 4096)) else { return };
        let pages = (16 << 20) / PAGE_SIZE;
        let mut r = p.map(pages * PAGE_SIZE).unwrap();
        for pg in 0..pages {
            fill_page(page(&mut r, pg), 3, pg, false);
        }
        // Everything to the store (the first pages may still be in the swap cache), then read the
        // first 64 pages back: CLEAN now.
        evict_everything(&r);
        for pg in 0..64 {
            assert_eq!(check_page(page(&mut r, pg), 3, pg, false), None);
        }
        settle(&r);
        assert_eq!(r.clean_pages(), 64, "{mode:?}: {:?} {:?}", r.page_states(), p.stats());
        // SAFETY: dropping our own pages; they read as zero afterwards, as anonymous memory does.
        unsafe { libc::madvise(r.as_ptr().cast(), 32 * PAGE_SIZE, libc::MADV_DONTNEED) };
        // Push everything out: pages 0..32 are evicted as dropped, 32..64 as clean.
        evict_everything(&r);
        assert!(p.stats().clean_discarded >= 32, "clean_discarded {}", p.stats().clean_discarded);
        for pg in 0..32 {
            assert!(page(&mut r, pg).iter().all(|&b| b == 0), "page {pg} came back from a stale entry");
        }
        for pg in 32..64 {
            assert_eq!(check_page(page(&mut r, pg), 3, pg, false), None);
        }
        // Dropped, then touched before any eviction: also zero.
        for pg in 64..96 {
            assert_eq!(check_page(page(&mut r, pg), 3, pg, false), None);
        }
        // SAFETY: as above.
        unsafe { libc::madvise(r.as_ptr().add(64 * PAGE_SIZE).cast(), 32 * PAGE_SIZE, libc::MADV_DONTNEED) };
        for pg in 64..96 {
            assert!(page(&mut r, pg).iter().all(|&b| b == 0), "page {pg}");
            fill_page(page(&mut r, pg), 4, pg, false);
        }
        evict_everything(&r);
        for pg in 64..96 {
            assert_eq!(check_page(page(&mut r, pg), 4, pg, false), None);
        }
    }
}

/// Readers keep pages clean while writers dirty them and reclaim evicts them, from several
/// threads: each page holds the number of writes it has had, and every write is checked.
#[test]
fn writers_racing_readers_and_eviction_of_clean_pages_lose_nothing() {
    for (mode, folio) in CASES {
        let Some(p) = pager(cfg(mode, folio)) else { return };
        let pages = (24 << 20) / PAGE_SIZE;
        let r = p.map(pages * PAGE_SIZE).unwrap();
        let base = r.as_ptr() as usize;
        let threads = 4;
        // Thread t owns the pages pg % threads == t for writing; every thread reads everything.
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let mut writers = Vec::new();
            for t in 0..threads {
                let stop = &stop;
                writers.push(s.spawn(move || {
                    let mut counts = vec![0u64; pages];
                    for k in 0..60_000u64 {
                        let pg = ((mix64(k ^ (t as u64) << 40) % (pages / threads) as u64) as usize) * threads + t;
                        // SAFETY: page pg is in the region; only thread t writes it, with
                        // volatile word accesses (readers read it concurrently).
                        let w = unsafe { ((base + pg * PAGE_SIZE) as *mut u64).add((k % 512) as usize) };
                        // SAFETY: as above.
                        let first = unsafe { ((base + pg * PAGE_SIZE) as *mut u64).read_volatile() };
                        assert_eq!(first, counts[pg], "{mode:?} folio {folio} page {pg}: a write was lost");
                        if k % 3 == 0 {
                            counts[pg] += 1;
                            // SAFETY: as above.
                            unsafe { ((base + pg * PAGE_SIZE) as *mut u64).write_volatile(counts[pg]) };
                        } else {
                            // SAFETY: as above.
                            let _ = unsafe { w.read_volatile() };
                        }
                    }
                    stop.store(true, Ordering::Relaxed);
                    counts
                }));
            }
            // A reader that keeps turning pages clean.
            let stop = &stop;
            s.spawn(move || {
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let pg = (mix64(k ^ 0xabc) % pages as u64) as usize;
                    // SAFETY: a volatile read of a word in the region.
                    let _ = unsafe { ((base + pg * PAGE_SIZE + 8) as *const u64).read_volatile() };
                    k += 1;
                }
            });
            let counts: Vec<Vec<u64>> = writers.into_iter().map(|h| h.join().unwrap()).collect();
            r.evict_all();
            for pg in 0..pages {
                // SAFETY: reading a word of the region; all threads are done.
                let v = unsafe { ((base + pg * PAGE_SIZE) as *const u64).read_volatile() };
                assert_eq!(v, counts[pg % threads][pg], "{mode:?} folio {folio} page {pg} after the run");
            }
        });
        let s = p.stats();
        assert!(s.clean_kept > 0 && s.clean_dirtied > 0 && s.clean_evicted > 0, "{s:?}");
        eprintln!("{mode:?} folio {folio}: {} pages handed back to writers", s.reclaim_handed_back);
        drop(r);
        assert_eq!(stored_pages(&p), 0, "{mode:?} folio {folio}: entries leaked");
    }
}
