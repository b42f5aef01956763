//! The end of a run whose runner is gone: [`end_run`] rewrites its metrics file one last time
//! (`uswap_run_up 0`) and removes its tree directory; [`forget_stale`] does so for the stale
//! trees `uswap status` showed once nothing of them runs.
//!
//! Locking: none. The metrics file is written to a temporary file and renamed, so readers see
//! it whole.

use super::metrics::prometheus;
use super::sample::{running, tree_at, Tree};
use super::view::{mark_over, with_rates};
use crate::rundir::write_atomic;
use std::path::Path;

/// End the stale trees of `shown` (their runner died, e.g. with its guardian) that have no
/// process left running ([`end_run`]); a stale tree with processes running stays listed.
pub(crate) fn forget_stale(shown: &[Tree]) {
    for t in shown.iter().filter(|t| !t.up) {
        if !t.procs.iter().chain(&t.unmanaged).any(running) {
            end_run(&t.dir);
        }
    }
}

/// The end of the run of tree directory `dir`, whose runner is gone (its guardian calls it
/// once it has ended the tree, `uswap status` for a stale tree): the metrics file named in
/// `run.json` is rewritten once more saying the run is over (`uswap_run_up 0`), and the
/// directory is removed. Nothing when its runner still runs.
pub(crate) fn end_run(dir: &Path) {
    let Some(t) = tree_at(dir) else {
        // Its runner died before it described the tree: nothing to tell.
        let _ = std::fs::remove_dir_all(dir);
        return;
    };
    if t.up {
        return;
    }
    if let Some(m) = t.info["metrics_file"].as_str() {
        let mut doc = with_rates(&[], std::slice::from_ref(&t));
        mark_over(&mut doc);
        write_atomic(Path::new(m), prometheus(&doc).as_bytes());
    }
    let _ = std::fs::remove_dir_all(dir);
}
