//! Progress display for long-running commands: drawn on stderr only when it is a terminal and
//! `--json` is off, so piped and machine-read output stays clean.
//!
//! Locking: indicatif's own (the steady tick runs on its thread).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// Whether progress may be drawn.
pub fn visible(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

/// A spinner with the current step as its message (hidden when not [`visible`]).
pub fn spinner(json: bool, what: &str) -> ProgressBar {
    if !visible(json) {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(s) = ProgressStyle::with_template("{spinner} {prefix}: {msg} ({elapsed})") {
        pb.set_style(s);
    }
    pb.set_prefix(what.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

/// A spinner for a benchmark, cleared when its result is about to be printed ([`Spin::done`])
/// or when it is dropped (an error).
pub struct Spin(ProgressBar);

impl Spin {
    /// Start spinning (nothing is drawn when not [`visible`]).
    pub fn new(json: bool, what: &str) -> Spin {
        let pb = spinner(json, what);
        pb.set_message("measuring");
        Spin(pb)
    }
    /// Clear the spinner before the result is printed.
    pub fn done(&self) {
        self.0.finish_and_clear();
    }
}

impl Drop for Spin {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hidden_for_json_and_pipes() {
        assert!(super::spinner(true, "x").is_hidden());
        assert!(!super::visible(true));
    }
}
