//! Teardown: creating and dropping pagers (in every mode, with and without regions in use)
//! finishes. A watchdog aborts the test process if a drop hangs.
mod common;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use uswap_pager::{FaultMode, PagerConfig, ReclaimMode};

/// Run `f`; abort the process (a hang is the bug) if it has not returned after `secs`.
fn with_watchdog(secs: u64, what: &str, f: impl FnOnce()) {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let what = what.to_string();
    std::thread::spawn(move || {
        for _ in 0..secs * 10 {
            std::thread::sleep(Duration::from_millis(100));
            if d.load(Ordering::Acquire) {
                return;
            }
        }
        eprintln!("teardown hung: {what}");
        std::process::abort();
    });
    f();
    done.store(true, Ordering::Release);
}

/// A pager for the configuration named `name` ("lz4store": over the test store).
fn make(name: &str, cfg: PagerConfig) -> Option<std::sync::Arc<uswap_pager::Pager>> {
    if name == "lz4store" {
        common::pager_with_lz4store(cfg)
    } else {
        common::pager(cfg)
    }
}

fn configs() -> Vec<(&'static str, PagerConfig)> {
    let base = PagerConfig { limit_bytes: 4 << 20, folio_size: 4096, ..Default::default() };
    vec![
        ("sigbus", base.clone()),
        ("thread", PagerConfig { fault_mode: FaultMode::Thread, ..base.clone() }),
        ("background", PagerConfig { reclaim: ReclaimMode::Background, ..base.clone() }),
        ("event_remove", PagerConfig { event_remove: true, ..base.clone() }),
        ("lz4store", base),
    ]
}

#[test]
fn create_and_drop_repeatedly() {
    for (name, cfg) in configs() {
        with_watchdog(60, name, || {
            for _ in 0..20 {
                let Some(p) = make(name, cfg.clone()) else { return };
                drop(p);
            }
        });
    }
}

#[test]
fn drop_after_paging() {
    for (name, cfg) in configs() {
        with_watchdog(60, name, || {
            for i in 0..5 {
                let Some(p) = make(name, cfg.clone()) else { return };
                let mut r = p.map(8 << 20).unwrap();
                for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
                    common::fill_page(page, i, pg, false);
                }
                assert!(p.stats().evicted_pages > 0);
                // Alternate the order of the last references.
                if i % 2 == 0 {
                    drop(r);
                    drop(p);
                } else {
                    drop(p);
                    drop(r);
                }
            }
        });
    }
}

#[test]
fn drop_on_another_thread() {
    with_watchdog(60, "other thread", || {
        for i in 0..5 {
            let Some(p) = common::pager(PagerConfig { limit_bytes: 4 << 20, folio_size: 4096, ..Default::default() })
            else {
                return;
            };
            let mut r = p.map(8 << 20).unwrap();
            for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
                common::fill_page(page, i, pg, true);
            }
            std::thread::spawn(move || {
                drop(r);
                drop(p);
            })
            .join()
            .unwrap();
        }
    });
}
