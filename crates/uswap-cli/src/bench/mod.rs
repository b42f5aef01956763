//! Benchmarks. Each submodule owns one `uswap bench NAME` and prints what it measured, as a
//! table for people or as one JSON object with `--json`.

use clap::Subcommand;

pub mod alloc;
pub mod drain;
pub mod file;
pub mod programs;
pub mod spawn;
pub mod table;
pub mod usemem;
pub mod zpool;

/// An error that ends the command with a message and an exit code.
#[derive(Debug)]
pub struct CliError {
    /// What went wrong, for the user.
    pub msg: String,
    /// 2 for usage/configuration errors, 1 for failures while running.
    pub code: u8,
}

impl CliError {
    /// A failure while running (exit 1).
    pub fn fail(msg: impl Into<String>) -> Self {
        CliError { msg: msg.into(), code: 1 }
    }
    /// A usage or configuration error (exit 2).
    pub fn usage(msg: impl Into<String>) -> Self {
        CliError { msg: msg.into(), code: crate::exit::USAGE }
    }
    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        self.code
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

/// Result of a command.
pub type CliResult = Result<(), CliError>;

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
    #[command(after_help = crate::help::BENCH_REDIS)]
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
