//! The view's document: the trees of two successive readings ([`super::sample`]) joined into
//! one JSON value with each process's rates (faults, swap-in and swap-out per second) and each
//! tree's totals ([`with_rates`]); what `--json` prints and what [`super::render`](fn@super::render) and
//! [`super::prometheus`] turn into text. [`mark_over`] marks a run as ended in it.
//!
//! Locking: none (it works on its caller's values).

use super::sample::{running, Tree};
use super::tree_dir::now_ms;
use crate::stats_read::u;
use serde_json::{json, Value};

/// Mark every tree of a [`with_rates`] document as over (its last metrics: `uswap_run_up 0`).
pub(crate) fn mark_over(doc: &mut Value) {
    for t in doc["trees"].as_array_mut().into_iter().flatten() {
        t["up"] = json!(false);
    }
}

/// Rates between two readings of the same process (`None` if the snapshot did not change).
fn rates(prev: Option<&Value>, now: &Value) -> Option<(f64, f64, f64)> {
    let prev = prev?;
    let dt = u(now, "/written_unix_ms").checked_sub(u(prev, "/written_unix_ms")).filter(|&d| d > 0)? as f64 / 1000.0;
    let d = |k: &str| u(now, k).saturating_sub(u(prev, k)) as f64 / dt;
    Some((d("/faults"), d("/swapin_pages") * 4096.0, d("/swapout_pages") * 4096.0))
}

/// Add `faults_per_s`, `swapin_bytes_per_s`, `swapout_bytes_per_s` to each process of `now`
/// that `prev` also saw with an older snapshot, and the tree's totals over running processes.
pub(crate) fn with_rates(prev: &[Tree], now: &[Tree]) -> Value {
    /// The byte figures summed over a tree's running processes.
    const SUMMED: [&str; 8] = [
        "rss_bytes",
        "charged_bytes",
        "resident_bytes",
        "swap_cache_bytes",
        "pool_bytes",
        "pool_stored_bytes",
        "pool_used_bytes",
        "file_bytes",
    ];
    const RATES: [&str; 3] = ["faults_per_s", "swapin_bytes_per_s", "swapout_bytes_per_s"];
    let mut out = Vec::new();
    for t in now {
        let before = prev.iter().find(|p| p.info["runner_pid"] == t.info["runner_pid"]);
        let mut total = serde_json::Map::new();
        let mut rate_tot = [0f64; 3];
        let mut procs = Vec::new();
        for p in &t.procs {
            let mut p = p.clone();
            let old = before.and_then(|b| b.procs.iter().find(|q| q["pid"] == p["pid"]));
            let r = rates(old, &p).map(|r| [r.0, r.1, r.2]);
            for (i, k) in RATES.iter().enumerate() {
                p[*k] = r.map_or(Value::Null, |r| json!(r[i].round()));
                if running(&p) {
                    rate_tot[i] += r.map_or(0.0, |r| r[i]);
                }
            }
            if running(&p) {
                for k in SUMMED {
                    let sum = total.get(k).and_then(Value::as_u64).unwrap_or(0) + u(&p, &format!("/{k}"));
                    total.insert(k.into(), json!(sum));
                }
            }
            procs.push(p);
        }
        for k in SUMMED {
            total.entry(k).or_insert(json!(0));
        }
        for (i, k) in RATES.iter().enumerate() {
            total.insert((*k).into(), json!(rate_tot[i].round()));
        }
        // Counters of the limit's trust, over every process that ran (ended ones too).
        for k in ["store_errors", "store_rejected_pages", "limit_breaks"] {
            total.insert(k.into(), json!(procs.iter().map(|p| u(p, &format!("/{k}"))).sum::<u64>()));
        }
        let unmanaged_bytes: u64 = t.unmanaged.iter().filter(|p| running(p)).map(|p| u(p, "/anon_bytes")).sum();
        total.insert("unmanaged_bytes".into(), json!(unmanaged_bytes));
        let started = t.info["started_unix_ms"].as_u64().unwrap_or(0);
        out.push(json!({
            "runner_pid": t.info["runner_pid"],
            "up": t.up,
            "pid": t.info["pid"],
            "command": t.info["command"],
            "limit_bytes": t.info["limit_bytes"],
            "tiers": t.info["tiers"],
            "elapsed_s": (now_ms().saturating_sub(started) as f64 / 100.0).round() / 10.0,
            "running_processes": procs.iter().filter(|p| running(p)).count(),
            "total": total,
            "processes": procs,
            "unmanaged_processes": t.unmanaged,
        }));
    }
    json!({ "trees": out })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_come_from_two_snapshots() {
        let a = json!({"written_unix_ms": 1000, "faults": 10, "swapin_pages": 0, "swapout_pages": 5});
        let b = json!({"written_unix_ms": 3000, "faults": 210, "swapin_pages": 512, "swapout_pages": 5});
        assert_eq!(rates(Some(&a), &b), Some((100.0, 512.0 * 4096.0 / 2.0, 0.0)));
        assert_eq!(rates(Some(&b), &b), None, "the same snapshot twice gives no rate");
        assert_eq!(rates(None, &b), None);
    }
}
