//! Evictions racing writes: several threads rewrite and check their pages (interleaved, so
//! threads share folios) while the pager evicts under its limit and another thread keeps
//! evicting the whole region. Every byte is checked after every round and at the end.
//! In thread fault mode (as under `uswap run`) a further thread keeps adopting mappings and
//! unmapping them, so that unmap events keep cutting the event thread's copies short.
mod common;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use uswap_pager::{FaultMode, PagerConfig, Replacement};

fn hammer(folio: usize, replacement: Replacement) {
    hammer_in(FaultMode::Sigbus, folio, replacement, true, false);
}

/// Which round's bytes page `pg` holds, for the message of a failed check.
fn describe(page: &[u8], pg: usize, rounds: u64) -> String {
    let words: Vec<u64> = page.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
    let round_of = |i: usize| (0..rounds).find(|&k| words[i] == common::word(k, pg, i, false));
    let zero = words.iter().filter(|&&w| w == 0).count();
    format!("first word from round {:?}, last from round {:?}, {zero} of 512 words zero", round_of(0), round_of(511))
}

/// `evictor`: a thread evicts the whole region in a loop (`Region::evict_all`); `churn`: a
/// thread adopts fresh mappings and unmaps them (unmap events while faults are served).
fn hammer_in(mode: FaultMode, folio: usize, replacement: Replacement, evictor: bool, churn: bool) {
    let cfg = PagerConfig {
        limit_bytes: 2 << 20,
        folio_size: folio,
        replacement,
        reclaim_batch: 64,
        fault_mode: mode,
        reclaim: common::reclaim_for(mode),
        ..Default::default()
    };
    let Some(p) = common::pager(cfg) else { return };
    let r = Arc::new(p.map(8 << 20).unwrap());
    let pages = r.len() / 4096;
    let threads = 4;
    let rounds = 4u64;
    let stop = Arc::new(AtomicBool::new(false));
    let evictor = evictor.then(|| {
        let (r, stop) = (r.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += r.evict_all();
            }
            n
        })
    });
    // Unmap events while faults are served: in thread mode the event thread gives a copy up
    // (`EAGAIN`) when an event is pending, after the kernel may have mapped part of a folio.
    let churner = churn.then(|| {
        let (p, stop) = (p.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // The program's own mapping, adopted and unmapped behind the pager's back.
                let len = 256 << 10;
                let a = common::anon_map(len);
                let adopted = p.adopt(a, len).is_ok();
                // SAFETY: a is ours, len bytes, mapped above; nothing refers to it after.
                unsafe {
                    if adopted {
                        (a as *mut u8).write_volatile(1);
                    }
                    assert_eq!(libc::munmap(a as *mut _, len), 0);
                }
                n += u64::from(adopted);
            }
            n
        })
    });
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
                            // A read first: with clean pages kept, the folio comes back
                            // write-protected, and the write below must fault.
                            if let Some(off) = common::check_page(page, round - 1, pg, false) {
                                panic!("page {pg} round {round}: byte {off} differs; {}", describe(page, pg, rounds));
                            }
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
    let evicted = evictor.map(|e| e.join().unwrap());
    let churned = churner.map(|c| c.join().unwrap());
    for (pg, page) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(page, rounds - 1, pg, false), None, "page {pg} at the end");
    }
    let st = p.stats();
    eprintln!(
        "{mode:?} folio {folio}: evicted by the evictor thread {evicted:?}, regions adopted and unmapped \
         {churned:?}, waits {}, {st:?}",
        st.fault_waits
    );
    assert!(st.evicted_pages > 0 && evicted != Some(0));
    assert!(churned != Some(0), "no mapping was adopted and unmapped");
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

/// SIGBUS fault mode (the C API's) with the churn thread: the program unmaps adopted memory
/// while other threads' direct reclaim evicts it. A plain copy of a range unmapped under it
/// would crash the process (SIGSEGV), so adopted regions are copied through the kernel
/// (`reclaim::via_kernel`).
#[test]
fn writes_race_evictions_and_unmap_events_64k_sigbus_mode() {
    hammer_in(FaultMode::Sigbus, 65536, Replacement::TwoList, true, true);
}

/// Reads, then writes, race background reclaim and unmap events, in thread mode with 64 KiB
/// folios (`uswap run`'s setting). A page a swap-in finds mapped already is never published
/// clean (`fault::copy_runs`); published clean, it could lose whole pages, as a JVM would lose
/// HashMap entries.
#[test]
fn reads_and_writes_race_reclaim_and_unmap_events_64k_thread_mode() {
    hammer_in(FaultMode::Thread, 65536, Replacement::TwoList, false, true);
}

/// The same with a thread evicting the whole region in a loop (`Region::evict_all`, the C
/// API's `uswap_evict_all`). Three races of a fault path with an eviction, each an ioctl on a
/// page the fault path does not hold, would lose writes (a whole page: zeros, or an older
/// round): the zero page mapped for a `RESIDENT` word the eviction has just taken and dropped,
/// zeros mapped for a page an eviction is dropping, and the protection of a page taken back
/// lifted after its block is republished and taken by the next eviction (`fault::take_back`).
#[test]
fn reads_and_writes_race_evict_all_and_unmap_events_64k_thread_mode() {
    hammer_in(FaultMode::Thread, 65536, Replacement::TwoList, true, true);
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
