//! Progress display for long-running commands: drawn on stderr only when it is a terminal and
//! `--json` is off, so piped and machine-read output stays clean.
//!
//! A benchmark makes one [`Bar`] whose length is the work it will do, in its natural unit
//! (bytes moved, pages stored, replay steps, operations), and its inner functions advance it
//! with [`ProgressBar::inc`] between measured phases or once per batch, never per page inside a
//! timed loop. A hidden bar still counts (position and length), which is what the tests check.
//!
//! Locking: indicatif's own (the steady tick runs on its thread).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// Whether progress may be drawn.
pub fn visible(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

/// What a bar counts.
#[derive(Clone, Copy, Debug)]
pub enum Unit {
    /// Bytes, shown as KiB/MiB/GiB.
    Bytes,
    /// Things of this name ("pages", "steps", "ops").
    Count(&'static str),
}

/// How often the bar is redrawn when nothing advances it (the elapsed time keeps moving).
const TICK: Duration = Duration::from_millis(200);

/// The progress bar of a benchmark: `len` units of work, hidden when not [`visible`]. It is
/// cleared when the result is about to be printed ([`Bar::done`]) or when it is dropped (an
/// error). Inner functions take it as `&ProgressBar` (through `Deref`).
pub struct Bar(ProgressBar);

impl Bar {
    /// A bar for `what` (e.g. "uswap bench file") of `len` units, redrawn by a ticker thread.
    pub fn new(json: bool, what: &str, len: u64, unit: Unit) -> Bar {
        let b = Bar::without_ticker(json, what, len, unit);
        b.tick_steadily();
        b
    }

    /// The same without the ticker thread, for a command that forks first (the bar is drawn
    /// only when advanced until [`Bar::tick_steadily`]).
    pub fn without_ticker(json: bool, what: &str, len: u64, unit: Unit) -> Bar {
        if !visible(json) {
            let pb = ProgressBar::hidden();
            pb.set_length(len);
            return Bar(pb);
        }
        let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        let counts = match unit {
            Unit::Bytes => "{binary_bytes}/{binary_total_bytes}".to_string(),
            Unit::Count(name) => format!("{{human_pos}}/{{human_len}} {name}"),
        };
        let template = format!("{{prefix}} [{{elapsed_precise}}] {{wide_bar}} {counts} {{msg}}");
        if let Ok(s) = ProgressStyle::with_template(&template) {
            pb.set_style(s);
        }
        pb.set_prefix(what.to_string());
        Bar(pb)
    }

    /// Start redrawing every `TICK` (no-op when hidden).
    pub fn tick_steadily(&self) {
        if !self.0.is_hidden() {
            self.0.enable_steady_tick(TICK);
        }
    }

    /// Clear the bar before the result is printed.
    pub fn done(&self) {
        self.0.finish_and_clear();
    }
}

impl std::ops::Deref for Bar {
    type Target = ProgressBar;
    fn deref(&self) -> &ProgressBar {
        &self.0
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_for_json_and_pipes() {
        assert!(!visible(true));
        for unit in [Unit::Bytes, Unit::Count("pages")] {
            let b = Bar::new(true, "x", 10, unit);
            assert!(b.is_hidden());
            // Hidden, it still counts: the benchmarks' tests check their accounting with it.
            b.inc(4);
            assert_eq!((b.position(), b.length()), (4, Some(10)));
            b.done();
        }
        // Under `cargo test` stderr is captured or piped, never a terminal here unless the
        // tests run on one; either way --json hides it.
        if !std::io::stderr().is_terminal() {
            assert!(Bar::new(false, "x", 1, Unit::Bytes).is_hidden());
        }
    }
}
