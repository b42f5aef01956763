//! The `uswap` command: the pager's main job, and the benchmarks that compare uswap with
//! the kernel's own swap on the same machine in the same run.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod bench;
mod kernel;
mod run;

/// Exit code for bad usage or bad configuration (clap uses 2 as well).
pub const EXIT_USAGE: u8 = 2;

#[derive(Parser)]
#[command(
    name = "uswap",
    version,
    about = "User-space swap: a swap table, compressed and encrypted tiers, and a userfaultfd pager"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Benchmarks (each prints what it measured; `--json` for machine-readable output).
    Bench {
        #[command(subcommand)]
        which: bench::Which,
    },
    /// The main job: a usemem-like workload on a uswap region under a limit with the default
    /// tiers, ending in throughput and swap statistics.
    Demo(bench::usemem::DemoArgs),
    /// Run a program with its anonymous memory under the pager (LD_PRELOAD).
    Run(run::RunArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Cmd::Run(a) = cli.cmd {
        return match run::run(a) {
            Ok(code) => ExitCode::from(code),
            Err(run::RunError(msg, code)) => {
                eprintln!("uswap: {msg}");
                ExitCode::from(code)
            }
        };
    }
    let res = match cli.cmd {
        Cmd::Bench { which } => bench::run(which),
        Cmd::Demo(a) => bench::usemem::demo(&a),
        Cmd::Run(_) => unreachable!("handled above"),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uswap: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
