//! The runner's side of a tree directory: [`TreeDir`] makes it (in the run directory, see
//! [`crate::rundir`]), writes its `run.json` ([`TreeDir::describe`]) and removes it when the
//! runner is done; [`SNAPSHOT_MS`] is how often `uswap run` asks each process of the tree to
//! rewrite its statistics there, and [`now_ms`] the clock `run.json` and the view share.
//!
//! Locking: none. `run.json` is written to a temporary file and renamed, so readers see it
//! whole.

use super::proc::start_ticks;
use crate::rundir::{run_dir, write_atomic};
use serde_json::json;
use std::path::{Path, PathBuf};

/// The snapshot interval `uswap run` asks the preload library for.
pub const SNAPSHOT_MS: u64 = 500;

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A running tree's directory, removed on drop.
pub(crate) struct TreeDir {
    /// The directory.
    pub path: PathBuf,
}

impl TreeDir {
    /// Make this runner's tree directory, in the run directory if it can be used, else in a
    /// private temporary directory (with the reason, for a warning).
    pub fn create() -> Result<(TreeDir, Option<String>), String> {
        use std::os::unix::fs::DirBuilderExt;
        let me = std::process::id();
        let (base, why) = match run_dir() {
            Ok(d) => (d, None),
            Err(e) => (std::env::temp_dir(), Some(e)),
        };
        for i in 0..100u32 {
            let d = if why.is_none() && i == 0 {
                base.join(me.to_string())
            } else {
                base.join(format!("uswap-run-{me}-{i}"))
            };
            // A stale directory of an earlier runner with our pid: the runner is dead.
            if why.is_none() && i == 0 && d.exists() {
                let _ = std::fs::remove_dir_all(&d);
            }
            // 0700: the run directory lets others through (to load the cached library), the
            // tree's own statistics stay the user's.
            if std::fs::DirBuilder::new().mode(0o700).create(&d).is_ok() {
                return Ok((TreeDir { path: d }, why));
            }
        }
        Err(format!("cannot create a statistics directory in {}", base.display()))
    }

    /// Write `run.json`: what `uswap status` shows about the tree, and the metrics file to
    /// rewrite when the run ends without its runner ([`super::end_run`]).
    pub fn describe(&self, command: &[String], pid: i32, limit: u64, folio: u64, tiers: &str, metrics: Option<&Path>) {
        let me = std::process::id() as i32;
        let doc = json!({
            "runner_pid": me,
            "runner_start_ticks": start_ticks(me),
            "pid": pid,
            "command": command,
            "limit_bytes": limit,
            "folio_bytes": folio,
            "tiers": tiers,
            "started_unix_ms": now_ms(),
            "metrics_file": metrics.map(|m| std::path::absolute(m).unwrap_or_else(|_| m.to_path_buf())),
        });
        write_atomic(&self.path.join("run.json"), doc.to_string().as_bytes());
    }
}

impl Drop for TreeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
