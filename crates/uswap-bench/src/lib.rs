//! The benchmarks of `uswap bench` and `uswap demo`. Each module owns one `uswap bench NAME`
//! and prints what it measured, as a table for people or as one JSON object with `--json`;
//! `kernel` is the kernel-swap side they compare with (memory cgroups, zram, a swap file, and
//! their restore). Built on the runner library (`uswap_run`: the statistics schema, progress
//! bars, the live view's samplers, the embedded preload library).
//!
//! Locking: none here (each benchmark documents its own threads).

use clap::Subcommand;

mod alloc;
mod drain;
mod file;
mod kernel;
mod programs;
mod spawn;
mod table;
mod usemem;
mod zpool;

pub use usemem::{demo, DemoArgs};

use uswap_run::exit::CliResult;

/// The benchmarks.
#[derive(Subcommand)]
pub enum Which {
    /// Swap table lookups/inserts against the pre-swap-table design (lock + ordered map).
    Table(table::Args),
    /// Fragmenting allocation replay under each fragment policy.
    Alloc(alloc::Args),
    /// Compressed pool: MB/s and RAM bytes per page, against kernel zram on the same data.
    Zpool(zpool::Args),
    /// Swap file tier: MB/s per I/O engine, folio size, encryption on/off.
    File(file::Args),
    /// Online drain of a tier, against the kernel's swapoff from zram.
    Drain(drain::Args),
    /// usemem-like workload under a limit: uswap pager against kernel swap in a memory cgroup.
    Usemem(Box<usemem::Args>),
    /// Real programs (Python, Node.js, Java, SQLite, sort, Redis, gcc, xz, Perl, a pipeline):
    /// native, kernel zram and kernel disk swap in a memory cgroup, and `uswap run` in a memory
    /// cgroup (its footprint), with timeouts and output checks.
    Programs(Box<programs::Args>),
    /// Redis holding several times the limit: GETs per second with and without a BGSAVE
    /// running, and the BGSAVE's time, uswap run against kernel zram and disk swap, each in a
    /// memory cgroup.
    #[command(after_help = uswap_run::help::BENCH_REDIS)]
    Redis(Box<programs::bgsave::Args>),
    /// Short-lived processes (a shell loop, a make of small files, a configure): native
    /// against `uswap run`, what a build or a script pays per command.
    Spawn(spawn::Args),
}

/// Run one benchmark.
pub fn run(w: Which) -> CliResult {
    match w {
        Which::Table(a) => table::run(&a),
        Which::Alloc(a) => alloc::run(&a),
        Which::Zpool(a) => zpool::run(&a),
        Which::File(a) => file::run(&a),
        Which::Drain(a) => drain::run(&a),
        Which::Usemem(a) => usemem::run(&a),
        Which::Programs(a) => programs::run(&a),
        Which::Redis(a) => programs::bgsave::run(&a),
        Which::Spawn(a) => spawn::run(&a),
    }
}
