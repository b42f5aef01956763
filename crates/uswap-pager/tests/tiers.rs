//! Tiers both ways in the background (`recomp::tier_moves`, run by the `uswap-recomp` thread):
//! pool objects unused for `writeback_age_ms` go to the file, and file objects read back since
//! they got there come back into the pool; every byte stays right throughout.
mod common;
use uswap_pager::{FaultMode, PagerConfig};

fn cfg(dir: &std::path::Path, writeback_age_ms: u64, promote: bool) -> PagerConfig {
    PagerConfig {
        limit_bytes: 8 << 20,
        folio_size: 65536,
        tiers: format!("zero,lz4,file:{}", dir.display()),
        // As under `uswap run`: faults served by the event thread.
        fault_mode: FaultMode::Thread,
        recompress_ms: 2,
        writeback_age_ms,
        promote,
        ..Default::default()
    }
}

fn engine_counters(p: &uswap_pager::Pager) -> uswap::StatsSnapshot {
    p.stats().engine.counters
}

/// Wait (bounded: the bound only guards against a hang) until `f` holds.
fn wait_for(what: &str, p: &uswap_pager::Pager, f: &dyn Fn() -> bool) {
    let t0 = std::time::Instant::now();
    while !f() {
        assert!(t0.elapsed().as_secs() < 60, "{what}: {:?}", p.stats());
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn old_pool_objects_are_written_back_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let Some(p) = common::pager(cfg(dir.path(), 1, false)) else { return };
    let mut r = p.map(32 << 20).unwrap();
    for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        common::fill_page(page, 1, pg, false);
    }
    assert!(p.pool_bytes() > 0, "the pool holds something: {:?}", p.stats());
    wait_for("no proactive writeback", &p, &|| engine_counters(&p).zswpwb_proactive > 0);
    // Everything old in the pool goes; the pool empties down to what is young.
    wait_for("the pool did not empty", &p, &|| p.pool_bytes() < 1 << 20);
    for (pg, page) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(page, 1, pg, false), None, "page {pg}");
    }
    assert_eq!(p.stats().store_errors, 0);
}

#[test]
fn refaulted_file_objects_are_promoted_into_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    // Writeback by age (300 ms) makes room in the pool; promotion only fills room the pool has.
    let Some(p) = common::pager(cfg(dir.path(), 300, true)) else { return };
    let mut r = p.map(64 << 20).unwrap();
    for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        common::fill_page(page, 2, pg, false);
    }
    wait_for("the pool did not empty", &p, &|| p.pool_bytes() < 1 << 20);
    // Scattered single-page reads: each swaps in one page of a 64 KiB folio stored in the
    // file and leaves the rest there, referenced.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let pages = r.as_slice().len() / 4096;
    for _ in 0..2000 {
        x = common::mix64(x);
        let pg = (x as usize) % pages;
        assert_eq!(common::check_page(&r.as_slice()[pg * 4096..(pg + 1) * 4096], 2, pg, false), None, "page {pg}");
    }
    wait_for("no promotion", &p, &|| engine_counters(&p).swp_promote > 0);
    for (pg, page) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(page, 2, pg, false), None, "page {pg}");
    }
    assert_eq!(p.stats().store_errors, 0);
}
