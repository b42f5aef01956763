//! Saying, at once and once, that the limit cannot hold.
//!
//! The engine passes a failing tier over (`uswap::fails`) and the pager holds faults while
//! nothing takes the pages it evicts (`uswap_pager`'s `stall`); this module is what the user
//! sees of it while the program runs. The scan thread calls [`check`] on every wake; it says
//! on stderr, each the first time:
//!
//! - a tier's failure of each kind (full filesystem, read-only, I/O error, swap file at its
//!   size), naming the tier (its path), the error, and what happens to the pages now;
//! - pages no tier takes without any tier failing (`--tiers zero`, or a pool that rejects
//!   what does not compress with no tier after it), or a charge over the limit by more than
//!   `OVER_SHARE` with every tier in RAM (a pool holding data that does not compress: it
//!   takes about what it stores): the tier list cannot bound the memory;
//! - the first fault mapped over the limit because the store failed for longer than faults
//!   wait (`USWAP_FULL_WAIT_MS`).
//!
//! A fork child starts with its parent's record of what was said (its copy of these
//! statics), so a tree says each thing once however many processes meet it.
//!
//! Locking: none; only the scan thread calls [`check`] (the flags are atomics so that the
//! statistics may read them from any thread).

use std::sync::atomic::{AtomicU64, Ordering};
use uswap::fails::{FailCounts, FailKind};
use uswap_pager::Pager;

/// What was said: bit `4 * tier + kind` for a tier's failure (8 tiers at most), [`REJECTED`]
/// and [`BROKEN`].
static SAID: AtomicU64 = AtomicU64::new(0);
const REJECTED: u64 = 1 << 40;
const BROKEN: u64 = 1 << 41;
/// The failure and rejection counts at the last look (skips the tier walk while none moved).
static SEEN: AtomicU64 = AtomicU64::new(0);
/// With every tier in RAM, a charge over the limit by more than 1/this of it is said.
const OVER_SHARE: u64 = 16;
/// [`uswap_pager::launch::FULL_WAIT_MS`], for the messages.
static WAIT_MS: AtomicU64 = AtomicU64::new(0);

/// Remember the wait in force (read by the library's start from the environment).
pub fn set_wait_ms(ms: u64) {
    WAIT_MS.store(ms, Ordering::Relaxed);
}

/// Look at the store's failure counters and say what is new. Cheap while nothing fails: two
/// atomic sums.
pub fn check(p: &Pager) {
    // Every tier in RAM and the charge well over the limit: the data does not compress enough.
    let raw_over = !p.pool_capped() && p.charged_bytes() > p.limit() + p.limit() / OVER_SHARE;
    let s = p.failure_events() + p.rejected_pages() + u64::from(raw_over);
    if s == SEEN.swap(s, Ordering::Relaxed) {
        return;
    }
    crate::reentry::internal(|| say_new(p, raw_over));
}

fn say_new(p: &Pager, raw_over: bool) {
    let mut said = SAID.load(Ordering::Relaxed);
    let mut any_failed = false;
    for t in 0..8 {
        let Some((name, f)) = p.tier_fails(t) else { break };
        any_failed |= f.total() > 0;
        for k in FailKind::ALL {
            let bit = 1u64 << (4 * t + k as usize);
            if f.get(k) > 0 && said & bit == 0 {
                said |= bit;
                say(&tier_failed(&name, k, &f, WAIT_MS.load(Ordering::Relaxed)));
            }
        }
    }
    if !any_failed && (p.rejected_pages() > 0 || raw_over) && said & REJECTED == 0 {
        said |= REJECTED;
        let tiers = &p.config().tiers;
        say(&if tiers.split(',').all(|t| t.trim() == "zero") {
            format!("--tiers {tiers} stores no page: what the limit pushes out stays in memory, so it cannot hold")
        } else {
            format!(
                "pages that do not compress cannot leave memory: no tier outside RAM takes them (--tiers {tiers}), \
                 so the limit cannot hold for them; add a file tier, e.g. --tiers {tiers},file:/var/tmp"
            )
        });
    }
    if p.limit_breaks() > 0 && said & BROKEN == 0 {
        said |= BROKEN;
        say(&format!(
            "the limit is broken: the store has failed for {} and faults now map pages over the limit \
             ({}=0 waits for ever)",
            wait_text(WAIT_MS.load(Ordering::Relaxed)),
            uswap_pager::launch::FULL_WAIT_MS.name()
        ));
    }
    SAID.store(said, Ordering::Relaxed);
}

/// The message for tier `name`'s first failure of kind `k`.
fn tier_failed(name: &str, k: FailKind, f: &FailCounts, wait_ms: u64) -> String {
    let what = match k {
        FailKind::NoSpace => "no space left on its filesystem",
        FailKind::ReadOnly => "its file cannot be written (read-only filesystem or no permission)",
        FailKind::Io => "an I/O error",
        FailKind::Full => "the swap file is full (every slot in use)",
    };
    let errno = if f.errno != 0 && k != FailKind::Full {
        format!(": {}", std::io::Error::from_raw_os_error(f.errno))
    } else {
        String::new()
    };
    format!(
        "tier {name} cannot store pages: {what}{errno}. The limit holds while other tiers take them (the next \
         tier; the compressed pool past its share, for data that compresses); else faults wait for room, {}",
        match wait_ms {
            0 => "for ever".to_string(),
            ms => format!("then map over the limit after {}", wait_text(ms)),
        }
    )
}

fn wait_text(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

fn say(msg: &str) {
    let line = format!("uswap: pid {}: {msg}\n", std::process::id());
    // SAFETY: write(2) of our message to stderr.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// What was said, for the statistics.
pub fn said() -> uswap_pager::record::Said {
    let s = SAID.load(Ordering::Relaxed);
    uswap_pager::record::Said {
        tier_failures: s & ((1 << 32) - 1) != 0,
        rejected: s & REJECTED != 0,
        limit_broken: s & BROKEN != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tier_failure_names_the_tier_the_error_and_the_wait() {
        let f = FailCounts { by_kind: [3, 0, 0, 0], errno: libc::ENOSPC };
        let m = tier_failed("file:/mnt/small", FailKind::NoSpace, &f, 10_000);
        assert!(m.contains("file:/mnt/small") && m.contains("No space left on device") && m.contains("10 s"), "{m}");
        let m = tier_failed("file:/x", FailKind::Full, &FailCounts::default(), 0);
        assert!(m.contains("swap file is full") && m.contains("for ever"), "{m}");
    }
}
