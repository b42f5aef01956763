//! The live view of running `uswap run` trees: where each tree's statistics live while it runs,
//! how they are read back, and what `uswap status`, `uswap top` (`crate::status`) and
//! `run --metrics-file` show. One file per role:
//!
//! - `tree_dir`: the runner's side, making its tree directory and writing `run.json`
//!   ([`TreeDir`], [`SNAPSHOT_MS`]);
//! - `proc`: what `/proc` says about a process (alive, which one a pid names, of which tree);
//! - `sample`: reading every tree back as it is now ([`trees`], [`tree_at`], [`Tree`]);
//! - `view`: two readings joined into the view's document, with rates and totals
//!   ([`with_rates`], [`mark_over`]);
//! - `render`: the document as the text of `uswap status` and `uswap top` ([`render`](fn@render)), with
//!   `compact`, its four-character figures;
//! - `metrics`: the document in the Prometheus text format (`metrics::prometheus`);
//! - `end`: the end of a run whose runner is gone ([`end_run`], [`forget_stale`]);
//! - `peak`: a thread keeping the largest of periodic readings ([`PeakSampler`]).
//!
//! Each `uswap run` makes a *tree directory* `<run dir>/<runner pid>/` (the run directory is
//! `$XDG_RUNTIME_DIR/uswap` when that directory can be used, else `/dev/shm/uswap-<uid>` where
//! `/dev/shm` is a tmpfs, else `/tmp/uswap-<uid>`; in memory because every process of a tree writes
//! a file there when it exits, a large part of what `uswap run` adds to a short-lived process on a
//! disk file system; mode 0711 and owned by the user: others may pass through it to load the cached
//! library but not list or write it; the tree directory is 0700, so nobody else can read or plant
//! statistics) holding `run.json` (the command, the limit, the runner's pid and start time, the
//! metrics file) and, for every process of the tree, the preload library's statistics:
//! `<pid>.json`, a snapshot rewritten every `USWAP_STATS_INTERVAL_MS` ([`SNAPSHOT_MS`] under
//! `uswap run`), and `<pid>.final.json`, written by `exit(3)`. A process that ends any other way
//! (`_exit`, a signal, SIGKILL) leaves its last snapshot, which the report marks as such. The
//! runner removes the directory when the program has ended; when the runner dies, its guardian
//! (`crate::guardian`) ends the tree and then the run ([`end_run`]). `uswap status` looks in every
//! run directory of the user ([`crate::rundir::run_dirs`]) and shows a tree whose runner died
//! without that (its guardian died too) as stale, ending it once nothing of it runs.
//!
//! Locking: none. Writers write a temporary file and rename it, so readers see whole files;
//! every reader works on its own copy.

mod compact;
mod end;
#[cfg(test)]
mod fixtures;
mod metrics;
mod peak;
mod proc;
mod render;
mod sample;
mod tree_dir;
mod view;

pub(crate) use end::{end_run, forget_stale};
pub(crate) use metrics::prometheus;
pub use peak::PeakSampler;
pub use render::render;
pub use sample::{tree_at, trees, Tree};
pub(crate) use tree_dir::TreeDir;
pub use tree_dir::SNAPSHOT_MS;
pub(crate) use view::{mark_over, with_rates};
