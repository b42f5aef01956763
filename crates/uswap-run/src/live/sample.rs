//! Reading the trees back as they are now: every tree directory of this user ([`trees`],
//! [`tree_at`]), its `run.json`, whether its runner still runs, and each process's statistics
//! as the view shows them ([`process_view`]). What it reads: `run.json`, the processes'
//! statistics files ([`crate::stats_read`]), the list of processes that run without the pager
//! (`crate::unmanaged`), and `/proc` for who still runs ([`super::proc`]).
//!
//! Locking: none. Every file it reads was written whole (written to a temporary file and
//! renamed); each [`Tree`] is its caller's own copy.

use super::proc::{alive, of_tree, start_ticks};
use crate::report;
use crate::rundir::run_dirs;
use crate::stats_read::{read_procs, u};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use uswap_pager::record::ProcRecord;

/// One process as `uswap status` shows it, from its raw statistics (`tiers` names the tiers).
pub(crate) fn process_view(raw: &ProcRecord, tiers: &str) -> Value {
    let p = report::process(raw, tiers);
    let (pid, is_final) = (raw.pid, raw.is_final);
    // Summed over the file tiers. A swap file shared with fork relatives (their `used_bytes`
    // then count the data stored before the fork in each of them) has clusters frozen for them.
    let files = |key: &str| -> u64 {
        p.get("tiers")
            .and_then(Value::as_object)
            .map(|t| t.iter().filter(|(k, _)| k.starts_with("file:")).map(|(_, v)| u(v, key)).sum())
            .unwrap_or(0)
    };
    let (file_bytes, file_frozen_bytes) = (files("/used_bytes"), files("/frozen_bytes"));
    json!({
        "pid": pid,
        "argv": raw.argv,
        "running": !is_final && alive(u64::try_from(pid).unwrap_or(0)),
        "final": is_final,
        "written_unix_ms": raw.written_unix_ms,
        "rss_bytes": raw.vm_rss_bytes,
        "charged_bytes": u(&p, "/memory/charged_bytes"),
        // Its share of the tree's limit, and the use rate that decides it (`uswap_pager::tree`).
        "share_bytes": u(&p, "/memory/limit_in_force_bytes"),
        "use_rate_bytes_per_s": raw.tree.map_or(0, |t| t.use_rate_bytes_per_s),
        "resident_bytes": u(&p, "/memory/resident_bytes"),
        "swap_cache_bytes": u(&p, "/memory/swap_cache_bytes"),
        "pool_bytes": u(&p, "/memory/pool_bytes"),
        "pool_stored_bytes": u(&p, "/compression/stored_bytes"),
        "pool_used_bytes": u(&p, "/compression/pool_used_bytes"),
        "compression_ratio": p.pointer("/compression/ratio").cloned().unwrap_or(Value::Null),
        "file_bytes": file_bytes,
        "file_frozen_bytes": file_frozen_bytes,
        "faults": u(&p, "/faults/total"),
        "swapin_pages": u(&p, "/swap/pswpin"),
        "swapout_pages": u(&p, "/swap/pswpout"),
        // The limit's trust: stores that failed (and where, why), evictions no tier took,
        // faults mapped over the limit after waiting for room (`uswap_pager`'s `stall`).
        "store_errors": u(&p, "/reclaim/store_errors"),
        "store_failures": report::store_failures(&p),
        "store_rejected_pages": u(&p, "/swap/swpout_rejected"),
        "limit_breaks": u(&p, "/reclaim/limit_breaks"),
        "store_failing": raw.pager.as_ref().is_some_and(|p| p.store_failing),
    })
}

/// A tree as seen now: `run.json` and its processes.
#[derive(Clone)]
pub struct Tree {
    /// Its tree directory.
    pub dir: PathBuf,
    /// `run.json`.
    pub info: Value,
    /// Whether its runner runs (the pid and start time of `run.json`): else the tree is
    /// *stale*, its runner died without ending it.
    pub up: bool,
    /// `process_view` of each process, by pid.
    pub procs: Vec<Value>,
    /// The processes of the tree found running without the pager (`crate::unmanaged`).
    pub unmanaged: Vec<Value>,
}

/// Whether the runner that `run.json` names still runs: the same pid with the same start time
/// (a pid reused since names another process), and not a zombie.
fn runner_alive(info: &Value) -> bool {
    let runner = info["runner_pid"].as_i64().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    runner > 0
        && start_ticks(runner).is_some()
        && start_ticks(runner) == info["runner_start_ticks"].as_u64()
        && alive(runner as u64)
}

/// The tree in directory `dir` (None without a readable `run.json`).
pub fn tree_at(dir: &Path) -> Option<Tree> {
    let info = std::fs::read(dir.join("run.json")).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok())?;
    let tiers = info["tiers"].as_str().unwrap_or("").to_string();
    let mut procs: Vec<Value> = read_procs(dir).iter().map(|v| process_view(v, &tiers)).collect();
    let mut unmanaged = std::fs::read(dir.join(crate::unmanaged::UNMANAGED_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<Vec<Value>>(&b).ok())
        .unwrap_or_default();
    let up = runner_alive(&info);
    if !up {
        // Nobody keeps these figures current any more: a process runs only if it is still
        // of the tree.
        let canon = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        for p in procs.iter_mut().chain(unmanaged.iter_mut()) {
            let pid = u(p, "/pid");
            if p["running"] == true && !(alive(pid) && of_tree(pid, &canon)) {
                p["running"] = json!(false);
            }
        }
    }
    Some(Tree { dir: dir.to_path_buf(), info, up, procs, unmanaged })
}

/// Every `uswap run` tree of this user, in every run directory ([`run_dirs`]): those whose
/// runner runs, and the stale ones (`up` false) that [`super::forget_stale`] ends once shown.
pub fn trees() -> Vec<Tree> {
    let mut out = Vec::new();
    for base in run_dirs() {
        let Ok(rd) = std::fs::read_dir(&base) else { continue };
        out.extend(rd.flatten().filter_map(|e| tree_at(&e.path())));
    }
    out.sort_by_key(|t| t.info["runner_pid"].as_i64());
    out
}

/// Is process record `p` of a running process?
pub(super) fn running(p: &Value) -> bool {
    p["running"].as_bool() == Some(true)
}
