//! The `uswap` command line: `run`, `status` and `top` (the runner library, `uswap_run`),
//! `bench` and `demo` (`uswap_bench`), completions and the manual page.

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

use uswap_bench as bench;
use uswap_run::{guardian, help, run, status};

#[derive(Parser)]
#[command(
    name = "uswap",
    version,
    about = "User-space swap: a swap table, compressed and encrypted tiers, and a userfaultfd pager",
    after_help = help::MAIN
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Benchmarks (each prints what it measured; `--json` for machine-readable output).
    #[command(after_help = help::BENCH)]
    Bench {
        #[command(subcommand)]
        which: bench::Which,
    },
    /// The main job: a usemem-like workload on a uswap region under a limit with the default
    /// tiers, ending in throughput and swap statistics.
    #[command(after_help = help::DEMO)]
    Demo(bench::DemoArgs),
    /// Run a program with its anonymous memory under the pager (LD_PRELOAD).
    #[command(after_help = "Examples:\n  uswap run --limit 512M -- python3 train.py\n  uswap run --limit 25% make -j2\n\nSee --help for the tier grammar, exit codes and environment variables.", after_long_help = help::RUN)]
    Run(run::RunArgs),
    /// Show every running `uswap run` of this user: limit, resident memory, swap cache, pool,
    /// file tier, fault and swap rates, per process.
    #[command(after_help = help::STATUS)]
    Status(status::StatusArgs),
    /// The same as `status`, refreshing (as top(1)).
    #[command(after_help = help::TOP)]
    Top(status::TopArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = help::COMPLETIONS)]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), or write one page per command into a directory.
    #[command(after_help = help::MAN)]
    Man {
        /// Write uswap.1, uswap-run.1, ... into this directory instead of printing uswap.1.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
}

fn man(dir: Option<&std::path::Path>) -> uswap_run::exit::CliResult {
    let cmd = Cli::command();
    let fail = |e: std::io::Error| uswap_run::exit::CliError::fail(format!("man: {e}"));
    match dir {
        None => clap_mangen::Man::new(cmd).render(&mut std::io::stdout().lock()).map_err(fail),
        Some(d) => clap_mangen::generate_to(cmd, d).map_err(fail),
    }
}

fn main() -> ExitCode {
    if let Some(code) = guardian::end_main() {
        return code;
    }
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
        Cmd::Demo(a) => bench::demo(&a),
        Cmd::Status(a) => status::status(&a),
        Cmd::Top(a) => status::top(&a),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "uswap", &mut std::io::stdout());
            Ok(())
        }
        Cmd::Man { dir } => man(dir.as_deref()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(argv: &[&str]) -> Result<run::RunArgs, clap::Error> {
        match Cli::try_parse_from(argv)?.cmd {
            Cmd::Run(a) => Ok(a),
            _ => panic!("not run"),
        }
    }

    fn cmd(a: &run::RunArgs) -> Vec<String> {
        a.command.iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn the_program_starts_at_dashdash_or_the_first_word() {
        let a = run_args(&["uswap", "run", "--limit", "1G", "python3", "-c", "x", "--tiers", "y"]).unwrap();
        assert_eq!(cmd(&a), ["python3", "-c", "x", "--tiers", "y"]);
        assert_eq!(a.tiers, uswap_pager::launch::DEFAULT_TIERS);
        let a = run_args(&["uswap", "run", "--limit", "1G", "--", "ls", "-l"]).unwrap();
        assert_eq!(cmd(&a), ["ls", "-l"]);
        let a = run_args(&["uswap", "run", "--limit=1G", "-q", "--", "--weird", "--", "-x"]).unwrap();
        assert_eq!(cmd(&a), ["--weird", "--", "-x"]);
        assert!(a.quiet);
        let a = run_args(&["uswap", "run", "--force", "--limit", "1G", "--stats", "-", "env", "-i", "A=b"]).unwrap();
        assert!(a.force);
        assert_eq!(cmd(&a), ["env", "-i", "A=b"]);
    }

    #[test]
    fn mistyped_options_are_errors_not_programs() {
        for (argv, similar) in [
            (&["uswap", "run", "--limit", "32M", "--tier", "zero,lz4", "--", "/bin/true"][..], Some("--tiers")),
            (&["uswap", "run", "--limit", "32M", "--follio", "4K", "/bin/true"][..], Some("--folio")),
            (&["uswap", "run", "--limit", "32M", "--json", "/bin/true"][..], None),
            (&["uswap", "run", "--limit", "32M"][..], None),
            (&["uswap", "run", "/bin/true"][..], None),
        ] {
            let e = match run_args(argv) {
                Err(e) => e,
                Ok(a) => panic!("{argv:?} parsed: {:?}", cmd(&a)),
            };
            assert_eq!(e.exit_code(), 2, "{argv:?}");
            let msg = e.to_string();
            if let Some(s) = similar {
                assert!(msg.contains(s), "{argv:?}: {msg}");
            }
        }
    }

    #[test]
    fn every_command_has_examples_and_the_parser_is_sound() {
        Cli::command().debug_assert();
        let mut c = Cli::command();
        c.build();
        for sub in c.get_subcommands().filter(|s| s.get_name() != "help") {
            let h = sub.get_after_help().or(sub.get_after_long_help()).map(|s| s.to_string()).unwrap_or_default();
            assert!(h.contains("Examples:"), "{} has no examples", sub.get_name());
            if sub.get_name() == "bench" {
                for b in sub.get_subcommands().filter(|s| s.get_name() != "help") {
                    let h = b.get_after_help().map(|s| s.to_string()).unwrap_or_default();
                    assert!(h.contains("Examples:"), "bench {} has no examples", b.get_name());
                }
            }
        }
        let run = c.find_subcommand("run").unwrap().get_after_long_help().unwrap().to_string();
        // The defaults it states are the launch module's.
        let pool = format!("(default {}, 5-50)", uswap_pager::launch::RUN_POOL_PERCENT);
        assert!(run.contains(&pool), "run --help lacks {pool}");
        let tiers = format!("default {}):", uswap_pager::launch::DEFAULT_TIERS);
        assert!(run.contains(&tiers), "run --help lacks {tiers}");
        // Every variable of the launch contract is documented in the user guide, and the ones a
        // user meets in the help too; the README states the exit statuses and the size forms.
        let guide = include_str!("../../../docs/user-guide.md");
        for d in uswap_pager::launch::ALL {
            use uswap_pager::launch::Scope;
            let var = d.name.to_str().unwrap();
            if matches!(d.scope, Scope::Runner | Scope::User | Scope::Cli) {
                assert!(run.contains(var), "run --help lacks {var}");
            }
            assert!(guide.contains(var), "docs/user-guide.md lacks {var}");
        }
        let readme = include_str!("../../../README.md");
        for s in ["128+N", "127", "126", "125", "uswap completions", "uswap man", "1.5G", "50%"] {
            assert!(readme.contains(s), "README lacks {s}");
        }
        for s in [
            "pool=",
            "accept=",
            "folio=",
            "file:PATH",
            "force",
            "127",
            "126",
            "125",
            "128+N",
            "USWAP_PRELOAD",
            "covers",
        ] {
            assert!(run.contains(s), "run --help lacks {s}");
        }
    }
}
