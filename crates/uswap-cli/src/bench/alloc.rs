//! `uswap bench alloc` (being written).

use super::{CliError, CliResult};

/// Options of `uswap bench alloc`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Run the benchmark.
pub fn run(_a: &Args) -> CliResult {
    Err(CliError::fail("not implemented yet"))
}
