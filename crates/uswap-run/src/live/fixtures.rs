//! Test fixtures of the live view: raw statistics of a process as the preload library writes
//! them, and a view document of two trees with every kind of process (running, exited, ended
//! without `exit(3)`, failing its store, without the pager), for the tests of the rendering and
//! the metrics.
//!
//! Locking: none.

use super::sample::{process_view, Tree};
use super::tree_dir::now_ms;
use super::view::with_rates;
use serde_json::{json, Value};
use std::path::PathBuf;

/// A raw snapshot of the preload library for process `pid` (the fields `process_view`
/// reads), its figures scaled by `k`.
fn raw(pid: u32, argv: &[&str], is_final: bool, k: u64) -> Value {
    json!({
        "pid": pid, "ppid": 1, "argv": argv, "final": is_final, "written_unix_ms": 1_000 * k,
        "vm_rss_bytes": (40 << 20) * k, "vm_hwm_bytes": (48 << 20) * k, "rss_at_start_bytes": 4 << 20,
        "tree": { "use_rate_bytes_per_s": 1_500_000 * k },
        "pager": {
            "faults": 70_000 * k, "fault_zero": 1_000 * k, "fault_swapin": 60_000 * k,
            "evicted_pages": 90_000 * k, "evicted_folios": 6_000 * k,
            "swpout": [0, 0, 0, 0, 5_000 * k, 0, 0, 0, 0, 0], "swpin": [3_000 * k, 0, 0, 0, 100 * k, 0, 0, 0, 0, 0],
            "resident_bytes": (20 << 20) * k, "cache_bytes": (1 << 20) * k, "pool_bytes": (3 << 20) * k,
            "charged_bytes": (24 << 20) * k, "limit_bytes": (32 << 20) * k, "limit_in_force_bytes": (30 << 20) * k,
            "engine": {
                "group": { "pool_max": 8 << 20, "swap_max": u64::MAX },
                "tiers": [
                    { "stored_pages": 2_000 * k, "used_bytes": (3 << 20) * k },
                    { "stored_pages": 20_000 * k, "used_bytes": (70 << 20) * k }
                ]
            }
        }
    })
}

/// `raw` with a swap file that filled its filesystem: evictions undone, pages no tier took,
/// faults over the limit.
fn failing(mut r: Value) -> Value {
    r["pager"]["store_errors"] = json!(5663);
    r["pager"]["limit_breaks"] = json!(40);
    r["pager"]["store_failing"] = json!(true);
    r["pager"]["engine"]["swpout_rejected"] = json!(1200);
    r["pager"]["engine"]["tiers"][1]["failures"] =
        json!({"nospace": 5663, "readonly": 0, "io": 0, "full": 0, "errno": libc::ENOSPC});
    r
}

/// Two trees as `uswap status` and the metrics file see them: one with a running parent
/// (this test's own pid, so that it counts as running), an exited child and a process that
/// runs without the pager; one whose program ended without exit(3).
pub(super) fn realistic_doc() -> Value {
    let tiers = uswap_pager::launch::DEFAULT_TIERS;
    let me = std::process::id();
    let info = |runner: u32, pid: u32| {
        json!({"runner_pid": runner, "runner_start_ticks": 1, "pid": pid, "command": ["python3", "train.py"],
               "limit_bytes": 512u64 << 20, "folio_bytes": 65536, "tiers": tiers, "started_unix_ms": now_ms()})
    };
    let view = |r: Value| process_view(&serde_json::from_value(r).expect("a record"), tiers);
    let a = Tree {
        dir: PathBuf::from("/nonexistent/4000001"),
        info: info(4_000_001, me),
        up: true,
        procs: vec![
            view(raw(me, &["/usr/bin/python3", "train.py", "--epochs", "3"], false, 1)),
            view(raw(4_000_003, &["/bin/sh", "-c", "gzip -9 out"], true, 2)),
        ],
        unmanaged: vec![json!({"pid": me, "command": "static-tool", "reason": "statically linked",
                               "anon_bytes": 7u64 << 20, "running": true})],
    };
    let b = Tree {
        dir: PathBuf::from("/nonexistent/4100000"),
        info: info(4_100_000, 4_100_001),
        up: false,
        procs: vec![view(failing(raw(4_100_001, &["sort"], false, 3)))],
        unmanaged: vec![],
    };
    with_rates(&[], &[a, b])
}
