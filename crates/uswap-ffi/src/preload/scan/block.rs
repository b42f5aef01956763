//! Passes run by program threads for a new block: a thread that gets a block of
//! [`NEW_MEMORY_MIN`] bytes or more from its allocator which no region covers ([`note_block`],
//! from the interposed malloc family) runs a pass itself, before the program writes the block,
//! unless a pass read the maps after the block was mapped, or the block is under
//! [`ALWAYS_PASS_MIN`] and a pass began less than [`SYNC_GAP_MS`] ago (then the next pass takes
//! it). It waits for a pass in progress rather than skip it: the scan thread alone is not
//! enough, since with more threads filling new memory than CPUs it is off the CPU for long
//! stretches (maybe holding the lock), and a block filled before a pass adopts it runs the
//! program over its limit.
//!
//! Locking: [`note_block`] takes [`crate::BIG`] with the asynchronous signals blocked, and
//! holds it for one pass; its counters are relaxed atomics.

use super::pass::{covered, pass_locked, PASSES};
use std::sync::atomic::{AtomicU64, Ordering};
use uswap_pager::now_ns;

/// Smallest block that makes a program thread run a pass (glibc maps blocks of 128 KiB or more
/// by itself, and grows its heaps by at least 128 KiB).
pub const NEW_MEMORY_MIN: usize = 64 << 10;
/// Least time between two passes run by program threads (a program that maps and frees large
/// blocks in a loop must not spend its time reading the maps).
pub const SYNC_GAP_MS: u64 = 1;
/// Blocks at least this large always get a pass of their own, however recent the last one
/// (unless a pass read the maps after the block was mapped): left to the scan thread, a large
/// block may be filled before its pass. Smaller ones in a burst wait for the next pass.
pub const ALWAYS_PASS_MIN: usize = 1 << 20;

/// The passes program threads ran for a new block.
pub(super) struct SyncPasses {
    /// How many.
    pub(super) passes: AtomicU64,
    /// When the last began (monotonic ms).
    last_ms: AtomicU64,
}

/// The program threads' passes.
pub(super) static SYNC: SyncPasses = SyncPasses { passes: AtomicU64::new(0), last_ms: AtomicU64::new(0) };

/// A block `[a, a + n)` the program's allocator returned (no allocator lock held): if no
/// region covers its first or last page, run a pass now on this thread (see the module's
/// paragraph), unless one read the maps after the block was mapped, or the block is smaller
/// than [`ALWAYS_PASS_MIN`] and a pass began less than [`SYNC_GAP_MS`] ago. Waits for
/// [`crate::BIG`] with the asynchronous signals blocked, so a handler cannot allocate on top of
/// a pass its own thread runs; the holder (the scan thread, another program thread's pass, a
/// `fork`'s prepare handler until the fork returns) never waits for a program thread.
pub fn note_block(a: usize, n: usize) {
    if !crate::preload::ready() {
        return;
    }
    let Some(p) = crate::preload::pager() else { return };
    let end = a.saturating_add(n);
    if covered(a, end) {
        // Maybe by a block freed at these addresses whose unmap is read but not applied yet
        // (glibc gives a freed block's addresses to the next `malloc` of its size): apply
        // it, look again.
        p.sync_events();
        if covered(a, end) {
            return;
        }
    }
    let mapped_by = now_ns();
    let now = mapped_by / 1_000_000;
    if n < ALWAYS_PASS_MIN && now < SYNC.last_ms.load(Ordering::Relaxed) + SYNC_GAP_MS {
        return;
    }
    // Asynchronous signals blocked from before the lock to after the unlock: a handler that
    // allocated a large block would otherwise wait for the lock its own thread holds.
    let _signals = uswap_pager::SignalsBlocked::new();
    // Waiting is what makes this work: a scan pass in progress may hold the lock with its
    // thread off the CPU (more writers than CPUs), and this thread's block must not be
    // filled before the pass that adopts it.
    crate::BIG.lock();
    // A pass that ran while this thread waited may have read the maps with the block in them.
    if PASSES.read_at_ns.load(Ordering::Acquire) <= mapped_by {
        SYNC.last_ms.store(now, Ordering::Relaxed);
        SYNC.passes.fetch_add(1, Ordering::Relaxed);
        pass_locked(p, false);
    }
    crate::BIG.unlock();
}
