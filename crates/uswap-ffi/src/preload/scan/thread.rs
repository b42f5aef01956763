//! The `uswap-scan` thread: its loop and its period. It watches the resident set size
//! (`/proc/self/statm`, every `USWAP_SCAN_MS` while it moves, backing off while it stays put:
//! `Poll`) and runs a pass ([`super::pass`]) when the resident set has grown by 1/128 of the
//! limit since the last pass, or every 500 ms. On the way it does the library's periodic work:
//! the failure check ([`crate::preload::failures`]), the thrashing window once a second
//! ([`crate::preload::thrash`]), the tree's shared limit ([`uswap_pager::tree`]) and the
//! engine's metadata peak, and the statistics snapshot every `USWAP_STATS_INTERVAL_MS`
//! ([`crate::preload::write_stats`]). A fork child starts the thread again
//! ([`restart_in_child`]).
//!
//! Locking: none of its own; a pass takes [`crate::BIG`]. The period and the snapshot interval
//! are relaxed atomics, written once before the thread starts. The thread allocates from the
//! library's internal heap.

use super::pass::scan_once;
use super::resident::{sample_engine_meta, sample_rss, statm};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use uswap_pager::Pager;

/// The thread's settings, read on the thread that starts the library.
struct Settings {
    /// `USWAP_SCAN_MS`: the shortest sleep between two readings of the resident set.
    scan_ms: AtomicU64,
    /// `USWAP_STATS_INTERVAL_MS` (0: off), read by [`start_thread`]: the scan thread never
    /// calls `getenv`, since a program may have moved its environment into its heap (Redis
    /// does), memory under the pager.
    stats_every_ms: AtomicU64,
}

static SETTINGS: Settings = Settings { scan_ms: AtomicU64::new(20), stats_every_ms: AtomicU64::new(0) };

/// Start the `uswap-scan` thread.
pub fn start_thread(p: Arc<Pager>, ms: u64) -> Result<(), String> {
    SETTINGS.scan_ms.store(ms, Ordering::Relaxed);
    let every = uswap_pager::launch::STATS_INTERVAL_MS.read(crate::preload::env).unwrap_or(0);
    SETTINGS.stats_every_ms.store(every, Ordering::Relaxed);
    spawn(p).map_err(|e| format!("cannot start the scan thread: {e}"))
}

fn spawn(p: Arc<Pager>) -> std::io::Result<()> {
    // Never joined: it runs as long as the program (its records stay with it).
    let _detached = uswap_pager::own::spawn("uswap-scan", Some(256 << 10), move || {
        p.join_background();
        let ms = SETTINGS.scan_ms.load(Ordering::Relaxed);
        let step = (p.config().limit_bytes / 128).max(256 << 10);
        let mut last_rss = statm().0;
        let mut last = std::time::Instant::now();
        // `USWAP_STATS_INTERVAL_MS`: also write the statistics file every so often (a live
        // view of a running program).
        let every = SETTINGS.stats_every_ms.load(Ordering::Relaxed);
        let mut last_stats = std::time::Instant::now();
        let (mut last_tree, mut last_reap) = (std::time::Instant::now(), std::time::Instant::now());
        let (mut window, mut last_second) = (crate::preload::thrash::Window::default(), std::time::Instant::now());
        let mut poll = Poll::new(ms);
        loop {
            std::thread::sleep(poll.interval());
            // This thread's thread vector stays pinned where glibc keeps it (`own`).
            uswap_pager::own::pin_thread_vector();
            let rss = sample_rss();
            poll.saw(rss);
            crate::preload::failures::check(&p);
            if last_second.elapsed() >= std::time::Duration::from_secs(1) {
                last_second = std::time::Instant::now();
                crate::preload::thrash::sample(&mut window, p.stats().fault_swapin, p.config().limit_bytes);
            }
            // The tree's shared limit (uswap_pager::tree): publish the charge, take the share.
            if last_tree.elapsed().as_millis() as u64 >= uswap_pager::tree::UPDATE_MS {
                crate::reentry::internal(|| uswap_pager::tree::update(&p));
                sample_engine_meta(&p);
                last_tree = std::time::Instant::now();
                if last_reap.elapsed().as_millis() as u64 >= uswap_pager::tree::REAP_MS {
                    uswap_pager::tree::reap();
                    last_reap = std::time::Instant::now();
                }
            }
            if every > 0 && last_stats.elapsed().as_millis() as u64 >= every {
                crate::preload::write_stats(false);
                last_stats = std::time::Instant::now();
            }
            if rss > last_rss + step || last.elapsed().as_millis() >= 500 {
                scan_once(&p, false);
                last_rss = statm().0;
                last = std::time::Instant::now();
            }
        }
    })?;
    Ok(())
}

/// How long the scan thread sleeps between two readings of the resident set: the configured
/// period (`USWAP_SCAN_MS`) while the resident set moves, doubling while it stays put, up to
/// [`Poll::IDLE_MS`]. A fixed short period would wake the thread all the time whatever the
/// program did, a cost paid by a program asleep and by every process of a build. A program
/// that starts filling new memory after a quiet spell is seen at most [`Poll::IDLE_MS`]
/// later, and at the configured period from then on; blocks of
/// [`NEW_MEMORY_MIN`](super::NEW_MEMORY_MIN) or more from its allocator do not wait for the
/// thread at all ([`note_block`](super::note_block)).
struct Poll {
    min_ms: u64,
    cur_ms: u64,
    last_rss: u64,
}

impl Poll {
    /// Longest sleep while the resident set stays put (half the tree's update period,
    /// [`uswap_pager::tree::UPDATE_MS`], so the shares are taken as often as before).
    const IDLE_MS: u64 = uswap_pager::tree::UPDATE_MS / 2;
    /// Resident set change that counts as moving (a few pages come and go all the time).
    const MOVED: u64 = 256 << 10;

    fn new(min_ms: u64) -> Self {
        Poll { min_ms: min_ms.max(1), cur_ms: min_ms.max(1), last_rss: 0 }
    }

    fn interval(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.cur_ms)
    }

    /// Record a reading of the resident set and choose the next sleep.
    fn saw(&mut self, rss: u64) {
        let moved = rss.abs_diff(self.last_rss) >= Self::MOVED;
        self.last_rss = rss;
        self.cur_ms = if moved { self.min_ms } else { (self.cur_ms * 2).min(Self::IDLE_MS.max(self.min_ms)) };
    }
}

/// Start the thread again in a fork child (threads do not survive `fork`).
pub fn restart_in_child(p: Arc<Pager>) {
    super::unmanaged::mark_fork_child();
    if spawn(p).is_err() {
        let msg = b"uswap: warning: fork child has no scan thread\n";
        // SAFETY: write(2) of a static message.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_backs_off_while_the_resident_set_stays_and_not_while_it_moves() {
        let mut p = Poll::new(1);
        p.saw(100 << 20);
        assert_eq!(p.interval().as_millis(), 1, "the first reading moved from 0");
        let steps: Vec<u128> = (0..6)
            .map(|i| {
                p.saw((100 << 20) + i * 4096);
                p.interval().as_millis()
            })
            .collect();
        assert_eq!(steps, [2, 4, 5, 5, 5, 5]);
        p.saw(101 << 20);
        assert_eq!(p.interval().as_millis(), 1, "a MiB of growth brings the period back");
        p.saw(99 << 20);
        assert_eq!(p.interval().as_millis(), 1, "and so does a shrink");
        let mut slow = Poll::new(20);
        slow.saw(0);
        assert_eq!(slow.interval().as_millis(), 20, "a configured period over the idle one stays");
    }
}
