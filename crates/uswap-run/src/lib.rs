//! The runner: `uswap run` (a program or a process tree under a memory limit, with the preload
//! library embedded in release builds), `uswap status` and `uswap top` (the live view of the
//! trees that run), and the statistics in the schema of `docs/stats.md`. The `uswap` binary
//! (`uswap-cli`) and the benchmarks (`uswap-bench`) are built on it.
//!
//! Modules, from the bottom up: `exit` (uswap's own exit statuses and `CliError`), `help` (the
//! examples of each command's `--help`), `progress` (progress bars), `rundir` (the run
//! and tree directories and the budget file's place), `stats_read` (reading the statistics
//! records a tree's processes write), `procsum` (sums over `/proc` of a tree's processes) ->
//! `unmanaged` (the processes of the tree that run without a pager) -> `report` (the
//! statistics in the schema, and the summary) -> `live` (the live view) -> `preload` (the
//! embedded library and how it is found) -> `guardian` (the process that outlives the runner
//! and ends its tree) -> `run` (`uswap run`) -> `status` (`uswap status` and `top`).
//!
//! Locking: none here (each module documents its own).

pub mod exit;
pub mod guardian;
pub mod help;
pub mod live;
pub mod preload;
pub mod procsum;
pub mod progress;
pub mod report;
pub mod run;
pub mod rundir;
#[cfg(test)]
mod stats_doc;
mod stats_read;
pub mod status;
mod unmanaged;
