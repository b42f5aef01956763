//! Background recompression (`recomp` module): a pool tier with `recomp=zstd` under a small
//! limit, filled with text-like data that zstd packs tighter than lz4. A pass recompresses
//! what stayed idle since the previous one, the pool's RAM drops, and every byte reads back
//! exact, also while passes race with threads reading and writing the region.
mod common;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use uswap_pager::{PagerConfig, Region};

const TIERS: &str = "zero,lz4:recomp=zstd:recomp_level=3";

/// Fill page `pg` with text lines for `seed` (lz4 about 2.5:1, zstd about 4:1).
fn fill(page: &mut [u8], seed: u64, pg: usize) {
    let mut s = String::with_capacity(4200);
    let mut n = (pg as u64) * 1000 + seed * 7;
    while s.len() < 4096 {
        s.push_str(&format!("{n} item-{} {} seed={seed}\n", n % 97, n * 3));
        n += 1;
    }
    page.copy_from_slice(&s.as_bytes()[..4096]);
}

fn check(page: &[u8], seed: u64, pg: usize) -> bool {
    let mut want = [0u8; 4096];
    fill(&mut want, seed, pg);
    page == want
}

/// One test at a time: `Pager::quiesce` holds off every recompression pass of the process
/// (a fork copies all of it), so a quiesce in one test would stall another's passes.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn pager(recompress_ms: u64) -> Option<Arc<uswap_pager::Pager>> {
    common::pager(PagerConfig {
        limit_bytes: 8 << 20,
        folio_size: 65536,
        tiers: TIERS.into(),
        recompress_ms,
        recompress_cpu_percent: 100,
        ..Default::default()
    })
}

fn fill_all(r: &mut Region, seed: u64) {
    for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        fill(page, seed, pg);
    }
}

fn check_all(r: &Region, seeds: &dyn Fn(usize) -> u64) {
    for (pg, page) in r.as_slice().chunks(4096).enumerate() {
        assert!(check(page, seeds(pg), pg), "page {pg} differs");
    }
}

#[test]
fn a_pass_shrinks_the_pool_and_every_byte_reads_back() {
    let _serial = serial();
    // No background thread: the passes are the test's.
    let Some(p) = pager(0) else { return };
    let mut r = p.map(16 << 20).unwrap();
    fill_all(&mut r, 1);
    let before = p.pool_bytes();
    assert!(before > 1 << 20, "{:?}", p.stats());
    // The first pass only marks everything idle; the second recompresses it.
    let first = p.recompress_now();
    assert_eq!(first.objects, 0, "{first:?}");
    let second = p.recompress_now();
    let after = p.pool_bytes();
    let st = p.stats();
    assert!(second.objects > 0 && second.saved_bytes > 0, "{second:?} {st:?}");
    assert!(after < before * 9 / 10, "pool {before} -> {after}: {second:?} {st:?}");
    assert_eq!((st.recompress_passes, st.num_recompressed), (2, second.objects));
    assert!(st.recompress_cpu_ns > 0);
    check_all(&r, &|_| 1);
    // And once more after those loads (objects loaded since the mark are left alone).
    fill_all(&mut r, 2);
    p.recompress_now();
    p.recompress_now();
    check_all(&r, &|_| 2);
    assert_eq!(p.stats().store_errors, 0);
}

#[test]
fn the_background_thread_recompresses_idle_data() {
    let _serial = serial();
    let Some(p) = pager(5) else { return };
    let mut r = p.map(16 << 20).unwrap();
    fill_all(&mut r, 3);
    let before = p.pool_bytes();
    // Passes ran during the fill; wait for three more (one marks what the fill left, the next
    // recompresses it). Not for a time: the bound only guards against a hang.
    let passes = p.stats().recompress_passes;
    let t0 = std::time::Instant::now();
    while p.stats().recompress_passes < passes + 3 {
        assert!(t0.elapsed().as_secs() < 120, "no background pass recompressed: {:?}", p.stats());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let st = p.stats();
    assert!(st.num_recompressed > 0 && st.recompressed_pages > 0, "{st:?}");
    assert!(p.pool_bytes() < before, "pool {before} -> {}: {st:?}", p.pool_bytes());
    check_all(&r, &|_| 3);
}

#[test]
fn passes_racing_with_faults_lose_no_byte() {
    let _serial = serial();
    // Background passes every millisecond, and passes from this thread too.
    let Some(p) = pager(1) else { return };
    const PAGES: usize = 4096; // 16 MiB, twice the limit
    const WORKERS: usize = 3;
    const HOT: usize = PAGES / 2; // pages [0, HOT) are the workers'; the rest stays idle
    let mut r = p.map(PAGES * 4096).unwrap();
    fill_all(&mut r, 0);
    let base = r.as_mut_slice().as_mut_ptr() as usize;
    let done = Arc::new(AtomicBool::new(false));
    let mut th = Vec::new();
    for w in 0..WORKERS {
        let done = done.clone();
        th.push(std::thread::spawn(move || {
            // Worker w owns the pages pg of [0, HOT) with pg % WORKERS == w, and their seeds.
            let mut seed = vec![0u64; HOT];
            let mut x = w as u64 + 1;
            for _ in 0..6000 {
                x = common::mix64(x);
                let pg = (x as usize % (HOT / WORKERS)) * WORKERS + w;
                // SAFETY: the region outlives the workers (joined below) and page pg is this
                // worker's alone.
                let page = unsafe { std::slice::from_raw_parts_mut((base + pg * 4096) as *mut u8, 4096) };
                assert!(check(page, seed[pg], pg), "worker {w}: page {pg} differs (seed {})", seed[pg]);
                if x & 1 == 0 {
                    seed[pg] += 1;
                    fill(page, seed[pg], pg);
                }
            }
            done.store(true, Ordering::Relaxed);
            seed
        }));
    }
    while !th.iter().all(|t| t.is_finished()) {
        p.recompress_now();
        // The idle half is read now and then too (by this thread, between passes).
        let pg = HOT + (p.stats().recompress_passes as usize * 31) % (PAGES - HOT);
        assert!(check(&r.as_slice()[pg * 4096..(pg + 1) * 4096], 0, pg), "idle page {pg} differs");
    }
    let mut seeds = vec![0u64; PAGES];
    for (w, t) in th.into_iter().enumerate() {
        let s = t.join().unwrap();
        for pg in (w..HOT).step_by(WORKERS) {
            seeds[pg] = s[pg];
        }
    }
    assert!(done.load(Ordering::Relaxed));
    let st = p.stats();
    assert!(st.num_recompressed > 0, "{st:?}");
    assert_eq!(st.store_errors, 0, "{st:?}");
    check_all(&r, &|pg| seeds[pg]);
    // A last pass over what the check loaded, and everything once more.
    p.recompress_now();
    p.recompress_now();
    check_all(&r, &|pg| seeds[pg]);
}

/// Before a fork (`Pager::quiesce`, the preload's atfork prepare handler) the recompressor
/// leaves its pass and starts none until `resume`: a fork must not copy a pool lock or a
/// zspage's draining mark that a pass holds. Passes run again after.
#[test]
fn quiesce_holds_recompression_off_until_resume() {
    let _serial = serial();
    let Some(p) = pager(1) else { return };
    let mut r = p.map(16 << 20).unwrap();
    fill_all(&mut r, 5);
    for round in 0..50 {
        assert!(p.quiesce(), "round {round}: quiesce timed out: {:?}", p.stats());
        let a = p.stats().recompress_passes;
        std::thread::sleep(std::time::Duration::from_millis(5));
        let b = p.stats().recompress_passes;
        assert_eq!(a, b, "round {round}: a pass ran while quiesced");
        p.resume();
    }
    let passes = p.stats().recompress_passes;
    let t0 = std::time::Instant::now();
    while p.stats().recompress_passes < passes + 2 {
        assert!(t0.elapsed().as_secs() < 60, "no pass after resume: {:?}", p.stats());
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    check_all(&r, &|_| 5);
}
