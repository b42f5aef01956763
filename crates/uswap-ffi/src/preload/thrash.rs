//! Thrashing: telling the user when the working set does not fit in the limit.
//!
//! A program whose working set is larger than its limit does not fail under uswap: it runs, many
//! times slower, paging the same memory in and out (xz -9 and a 3M-entry Perl hash at half their
//! peak took more than 25× their native time; the kernel OOM-kills both there). Silence would
//! look like a hang. So the scan thread samples the major faults (swap-ins) once a second, and
//! when the last [`WINDOW`] seconds swapped in more than [`OVER_LIMIT`] times the limit (at
//! least [`MIN_FAULTS`] faults, so a short burst of streaming reads is not thrashing), it says so
//! once on stderr, with the figures, as the kernel's PSI would show a full memory stall. The
//! statistics carry `thrash.warned` and the worst window.
//!
//! The measure counts each major fault as 4 KiB, a lower bound when folios are swapped in whole:
//! a program that streams through a large data set once swaps it in once, about its size per
//! pass, and passes the check unless it re-reads the data many times a window.
//!
//! Locking: none; the window is owned by the scan thread, the published figures are atomics.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Seconds in the window.
pub const WINDOW: usize = 10;
/// Swapped-in bytes per window, as a multiple of the limit, that count as thrashing.
pub const OVER_LIMIT: u64 = 4;
/// Fewest major faults in a window that can count as thrashing.
pub const MIN_FAULTS: u64 = 100_000;

static WARNED: AtomicBool = AtomicBool::new(false);
static PEAK_WINDOW_FAULTS: AtomicU64 = AtomicU64::new(0);

/// The last [`WINDOW`] + 1 per-second samples of the major-fault counter.
#[derive(Debug, Default)]
pub struct Window {
    samples: [u64; WINDOW + 1],
    seen: usize,
}

impl Window {
    /// Record the counter's value one second after the previous sample; returns the major
    /// faults of the last [`WINDOW`] seconds once that many have passed.
    pub fn push(&mut self, faults: u64) -> Option<u64> {
        self.samples[self.seen % (WINDOW + 1)] = faults;
        self.seen += 1;
        if self.seen <= WINDOW {
            return None;
        }
        let oldest = self.samples[self.seen % (WINDOW + 1)];
        Some(faults.saturating_sub(oldest))
    }
}

/// Is `faults` major faults in one window thrashing under `limit` bytes?
pub fn thrashing(faults: u64, limit: u64) -> bool {
    faults >= MIN_FAULTS && faults.saturating_mul(4096) > limit.saturating_mul(OVER_LIMIT)
}

/// Feed one per-second sample; warns once when the window says thrashing.
pub fn sample(w: &mut Window, faults: u64, limit: u64) {
    let Some(n) = w.push(faults) else { return };
    PEAK_WINDOW_FAULTS.fetch_max(n, Ordering::Relaxed);
    if thrashing(n, limit) && !WARNED.swap(true, Ordering::Relaxed) {
        let msg = format!(
            "uswap: warning: pid {} is thrashing: {} swap-ins in the last {} s ({} MiB or more, {}x its {} MiB limit): \
             its working set does not fit, and it runs many times slower than with enough memory; a larger --limit \
             helps (run it once without uswap to see its peak)\n",
            std::process::id(),
            n,
            WINDOW,
            (n * 4096) >> 20,
            n * 4096 / limit.max(1),
            limit >> 20
        );
        // SAFETY: write(2) of our message to stderr.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
}

/// The figures for the statistics.
pub fn stats() -> uswap_pager::record::Thrash {
    uswap_pager::record::Thrash {
        warned: WARNED.load(Ordering::Relaxed),
        peak_window_swapins: PEAK_WINDOW_FAULTS.load(Ordering::Relaxed),
        window_s: WINDOW as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_reports_the_last_ten_seconds_only_once_full() {
        let mut w = Window::default();
        for s in 0..WINDOW as u64 {
            assert_eq!(w.push(s * 1000), None, "second {s}");
        }
        // Counter at 1000 per second: each full window holds 10 000.
        assert_eq!(w.push(WINDOW as u64 * 1000), Some(10_000));
        assert_eq!(w.push(WINDOW as u64 * 1000 + 5000), Some(14_000));
        // A quiet stretch drains the window.
        let mut last = None;
        for _ in 0..=WINDOW {
            last = w.push(WINDOW as u64 * 1000 + 5000);
        }
        assert_eq!(last, Some(0));
    }

    #[test]
    fn thrashing_needs_volume_and_many_faults() {
        let limit = 64 << 20;
        // 4x the limit in 4 KiB faults = 65 536 faults: under MIN_FAULTS.
        assert!(!thrashing(65_536, limit));
        assert!(thrashing(MIN_FAULTS, limit), "100k faults = 390 MiB > 4 x 64 MiB");
        // A large limit needs proportionally more.
        assert!(!thrashing(MIN_FAULTS, 1 << 30));
        assert!(thrashing(1_100_000, 1 << 30));
        assert!(!thrashing(u64::MAX, u64::MAX), "no overflow");
    }
}
