//! The restore guard: a log of every change made to the machine, undone in reverse order by
//! `restore()` or, at the latest, by `Drop` (error returns, panics, and the unwinding after a
//! signal all pass through it). Undo never stops at the first failure: each step is tried and
//! the failures are reported together. Single-threaded: owned by the benchmark's main thread.

use super::SysOps;
use std::path::{Path, PathBuf};

/// One change to undo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Undo {
    /// `swapoff` a device or file we enabled.
    Swapoff(PathBuf),
    /// Reset zram device `id` (frees its memory and disksize).
    ZramReset(u32),
    /// Remove zram device `id`, which we hot-added.
    ZramHotRemove(u32),
    /// Remove a cgroup directory we created.
    Rmdir(PathBuf),
    /// Write back a file's previous value (module parameters, subtree_control).
    Write {
        /// File relative to the root.
        rel: PathBuf,
        /// The value to write.
        value: String,
    },
    /// Delete a file we created (the swap file).
    RemoveFile(PathBuf),
}

/// The guard. See the module documentation.
pub struct Restore {
    ops: Box<dyn SysOps>,
    undo: Vec<Undo>,
    /// Print what is undone to stderr.
    pub verbose: bool,
}

impl Restore {
    /// A guard with nothing to undo yet.
    pub fn new(ops: Box<dyn SysOps>) -> Self {
        Restore { ops, undo: Vec::new(), verbose: false }
    }

    /// The operations this guard undoes through.
    pub fn ops(&self) -> &dyn SysOps {
        &*self.ops
    }

    /// Record a change that has been made.
    pub fn done(&mut self, u: Undo) {
        self.undo.push(u);
    }

    /// Pending undo steps, oldest first.
    #[cfg(test)]
    pub fn pending(&self) -> &[Undo] {
        &self.undo
    }

    fn apply(&self, u: &Undo) -> Result<(), String> {
        let ops = &*self.ops;
        let r = match u {
            Undo::Swapoff(p) => ops.swapoff(p),
            Undo::ZramReset(id) => ops.write(&PathBuf::from(format!("sys/block/zram{id}/reset")), "1"),
            Undo::ZramHotRemove(id) => ops.write(Path::new("sys/class/zram-control/hot_remove"), &id.to_string()),
            Undo::Rmdir(p) => ops.rmdir_cgroup(p),
            Undo::Write { rel, value } => ops.write(rel, value),
            Undo::RemoveFile(p) => std::fs::remove_file(ops.path(p)),
        };
        if self.verbose {
            eprintln!("uswap: restore: {u:?}: {}", if r.is_ok() { "ok" } else { "FAILED" });
        }
        r.map_err(|e| format!("{u:?}: {e}"))
    }

    /// Undo the most recent pending step equal to `u` now (e.g. the swapoff after a run),
    /// and forget it. If it fails it stays pending so the final restore tries again.
    pub fn undo_now(&mut self, u: &Undo) -> Result<(), String> {
        let Some(i) = self.undo.iter().rposition(|x| x == u) else {
            return Ok(());
        };
        self.apply(u)?;
        self.undo.remove(i);
        Ok(())
    }

    /// Undo everything, newest first. Returns the steps that failed (they are dropped: a
    /// second attempt would fail the same way).
    pub fn restore(&mut self) -> Vec<String> {
        let mut errs = Vec::new();
        while let Some(u) = self.undo.pop() {
            if let Err(e) = self.apply(&u) {
                errs.push(e);
            }
        }
        errs
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        for e in self.restore() {
            eprintln!("uswap: could not restore the machine: {e}");
        }
    }
}
