//! The pager in a few lines: a region four times the limit, filled and read back, then the
//! statistics. Skips (exit 0, with the reason) when this process may not use userfaultfd.
//!
//! ```text
//! cargo run --release -p uswap-pager --example basic
//! ```

use uswap_pager::{Pager, PagerConfig, PagerError};

fn main() {
    let cfg = PagerConfig { limit_bytes: 64 << 20, folio_size: 64 << 10, ..Default::default() };
    let pager = match Pager::new(cfg) {
        Ok(p) => p,
        Err(PagerError::Unavailable(why)) => {
            eprintln!("skipped: {why}");
            return;
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let mut r = pager.map(256 << 20).expect("map a region");
    for (i, w) in r.as_mut_slice().chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&((i / 16) as u64).to_le_bytes());
    }
    let ok = r.as_slice().chunks_exact(8).enumerate().all(|(i, w)| w == ((i / 16) as u64).to_le_bytes());
    let s = pager.stats();
    println!(
        "verified: {ok}; faults {} (swap-in {}), evicted {} pages, charged {} MiB of {} MiB",
        s.faults,
        s.fault_swapin,
        s.evicted_pages,
        s.charged_bytes >> 20,
        s.limit_bytes >> 20
    );
    println!("{}", serde_json::to_string_pretty(&s).unwrap());
    assert!(ok);
}
