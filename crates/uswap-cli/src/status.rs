//! `uswap status` and `uswap top`: the live view of every `uswap run` tree of this user, in
//! every run directory (the data and its rendering are in [`crate::live`]). A stale tree (its
//! runner died and nothing ended it) is shown as such, then ended once nothing of it runs.
//!
//! Locking: none.

use crate::bench::{CliError, CliResult};
use crate::live;

/// `uswap status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// One JSON object (`trees`: each with its command, limit, totals and processes).
    #[arg(long)]
    pub json: bool,
    /// Seconds between the two readings the rates (faults/s, swap-in and swap-out per
    /// second) are measured over; 0 reads once and shows no rates.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Also list the processes of each tree that ended (in --json they always are).
    #[arg(long)]
    pub all: bool,
}

/// `uswap top`.
#[derive(clap::Args, Debug)]
pub struct TopArgs {
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Stop after this many refreshes (default: until interrupted).
    #[arg(long)]
    pub count: Option<u64>,
    /// Also list the processes of each tree that ended.
    #[arg(long)]
    pub all: bool,
}

/// Print to stdout; a closed pipe (`uswap status | head`) ends the output quietly.
fn out(text: &str) -> bool {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes()).and_then(|()| o.flush()).is_ok()
}

fn interval(s: f64) -> Result<std::time::Duration, CliError> {
    if !(0.0..=3600.0).contains(&s) {
        return Err(CliError::usage(format!("--interval {s}: expected 0 to 3600 seconds")));
    }
    Ok(std::time::Duration::from_secs_f64(s))
}

/// Print the view once.
pub fn status(a: &StatusArgs) -> CliResult {
    let dt = interval(a.interval)?;
    let first = live::trees();
    let now = if dt.is_zero() || first.is_empty() {
        first.clone()
    } else {
        std::thread::sleep(dt);
        live::trees()
    };
    let prev = if dt.is_zero() { Vec::new() } else { first };
    let doc = live::with_rates(&prev, &now);
    if a.json {
        out(&format!("{doc:#}\n"));
    } else {
        out(&live::render(&doc, a.all));
    }
    live::forget_stale(&now);
    Ok(())
}

/// Refresh the view until interrupted (or `--count` times).
pub fn top(a: &TopArgs) -> CliResult {
    let dt = interval(a.interval)?;
    if dt.is_zero() {
        return Err(CliError::usage("--interval must be above 0 for top"));
    }
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut prev = live::trees();
    let mut n = 0u64;
    loop {
        std::thread::sleep(dt);
        let now = live::trees();
        let text = live::render(&live::with_rates(&prev, &now), a.all);
        // On a terminal: home and clear, then the view.
        let ok = if tty { out(&format!("\x1b[H\x1b[2J{text}")) } else { out(&format!("{text}\n")) };
        if !ok {
            return Ok(());
        }
        live::forget_stale(&now);
        prev = now;
        n += 1;
        if a.count.is_some_and(|c| n >= c) {
            return Ok(());
        }
    }
}
