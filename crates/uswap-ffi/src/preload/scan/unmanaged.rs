//! The memory outside the pager: measuring it at the end of each pass, charging the program's
//! part of it against the limit, and warning once when it is too large for the pager to make
//! room for.
//!
//! What stays outside is `RssAnon - (resident + swap cache + pool) - RssAnon at start`. The
//! program's part of that (less the library's own heap growth and the engine's page heap
//! beyond the pool) is charged against the limit ([`uswap_pager::Pager::set_outside`]): the
//! pager's limit in force shrinks by it, so a heap grown since the last pass, thread stacks or
//! locked memory push managed pages out instead of running the program over its limit. When
//! the unmanaged memory exceeds a quarter of the limit (and 32 MiB), it warns once on stderr:
//! past a quarter the pager cannot make room for it.
//!
//! Locking: none of its own; [`measure`] runs inside a pass, under [`crate::BIG`]. Its state is
//! relaxed atomics.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use uswap_pager::Pager;

/// What [`measure`] finds (and whether this process counts its memory whole).
pub(super) struct Unmanaged {
    /// The anonymous memory outside the pager at the last pass.
    pub(super) now: AtomicU64,
    /// The largest of `now`.
    pub(super) peak: AtomicU64,
    /// `RssAnon` at the pass at start-up.
    pub(super) anon_at_start: AtomicU64,
    /// This process is a fork child of a process under the pager ([`mark_fork_child`]): its
    /// memory outside the pager is counted whole ([`measure`]).
    fork_child: AtomicBool,
    /// The warning on stderr has been given.
    pub(super) warned: AtomicBool,
}

/// The memory outside the pager, as the last pass measured it.
pub(super) static UNMANAGED: Unmanaged = Unmanaged {
    now: AtomicU64::new(0),
    peak: AtomicU64::new(0),
    anon_at_start: AtomicU64::new(0),
    fork_child: AtomicBool::new(false),
    warned: AtomicBool::new(false),
};

/// This process is a fork child of a process under the pager (its scan thread is being started
/// again).
pub(super) fn mark_fork_child() {
    UNMANAGED.fork_child.store(true, Ordering::Relaxed);
}

/// The anonymous resident memory of a dormant process when it began (0: it started its pager
/// at once). Its pager's start counts from there: what the program touched meanwhile is the
/// program's, adopted and charged (or still being adopted) by then.
pub static ANON_AT_INIT: AtomicU64 = AtomicU64::new(0);

/// Measure the memory outside `p` (`first`: the pass at start-up, which records `RssAnon` as
/// the start, or [`ANON_AT_INIT`]), charge the program's part of it, and warn once if it is too
/// large.
pub(super) fn measure(p: &Pager, first: bool) {
    let anon = super::resident::status_bytes("RssAnon:");
    if first {
        let at_init = ANON_AT_INIT.load(Ordering::Relaxed);
        UNMANAGED.anon_at_start.store(if at_init > 0 { at_init } else { anon }, Ordering::Relaxed);
        return;
    }
    let managed = p.charged_bytes();
    let out = anon.saturating_sub(managed).saturating_sub(UNMANAGED.anon_at_start.load(Ordering::Relaxed));
    UNMANAGED.now.store(out, Ordering::Relaxed);
    UNMANAGED.peak.fetch_max(out, Ordering::Relaxed);
    // The program's part of it (less the library's own growth: its heap, the engine's page
    // heap beyond the pool) counts against the limit, as a cgroup would count it: the pager
    // makes room for it.
    let own = crate::preload::heap_growth() + uswap::tier::pages::heap().live_bytes().saturating_sub(p.pool_bytes());
    if UNMANAGED.fork_child.load(Ordering::Relaxed) {
        // A fork child's anonymous memory at its start and the library's memory are its
        // parent's copies: the tree's fixed overhead is allowed once, for the process that
        // started the pager, and every copy a child writes (the pager's tables, its buffers,
        // the program's own pages outside the pager) is memory of the tree. So the child
        // counts all of it, as it counts its resident pages: whole, shared or not.
        p.set_outside(anon.saturating_sub(managed));
    } else {
        p.set_outside(out.saturating_sub(own));
    }
    let limit = p.config().limit_bytes;
    if out > (limit / 4).max(32 << 20) && !UNMANAGED.warned.swap(true, Ordering::Relaxed) {
        let msg = format!(
            "uswap: warning: pid {}: {} MiB of anonymous memory is outside the pager (thread stacks, \
             shared, locked or executable memory, or mappings it could not adopt); the {} MiB limit does \
             not cover it\n",
            std::process::id(),
            out >> 20,
            limit >> 20
        );
        // SAFETY: write(2) of our message to stderr.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
}
