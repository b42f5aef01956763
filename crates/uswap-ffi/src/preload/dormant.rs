//! Dormant start: a process that stays small runs with no pager, and starts one when it grows.
//! Experimental, on with `USWAP_START_BYTES` (off by default: `docs/design.md`, "Dormant
//! start", says why).
//!
//! Most processes of a shell script or a build (`sh`, `sed`, `cc1` of a small file, `true`)
//! never hold more than a few MiB of anonymous memory. For them a pager (its userfaultfds, swap
//! file, tables and threads) costs more than the process itself. So in thread fault mode a
//! process starts *dormant*: the library only watches, and the pager starts the first time the
//! process's anonymous resident memory reaches [`uswap_pager::launch::START_BYTES`] (at most an
//! eighth of the limit). What the process mapped until then is adopted by the start's first
//! reconciliation pass, as at an eager start. SIGBUS fault mode starts at once (its seccomp
//! filter must be in place before the program's threads exist).
//!
//! What notices growth:
//! - the watcher thread (`uswap-watch`), which reads `/proc/self/statm` every 1 ms while the
//!   resident set moves and up to every 16 ms while it stays put: glibc's brk heap, its internal
//!   `mmap`, a large `.bss`, anything no call of ours sees;
//! - a program call that maps or makes writable a range of the threshold or more (interposed
//!   `mmap`, `mprotect`, `mremap`) or a `malloc` block of that size: it wakes the watcher and
//!   waits (at most [`URGENT_WAIT_MS`]) for the pager to start, so the range is managed from
//!   its first touch. The start itself runs on the watcher only: never on a program thread
//!   inside the program's call (a start there, in `malloc`, left pager memory registered with
//!   the userfaultfd now and then, and the event thread waited for itself).
//!
//! A dormant process's memory is still counted: the runner counts every process of the tree
//! that holds no slot of the budget file against the limit (`uswap run`'s tree watch), and the
//! process writes its final statistics at exit ([`stats_record`]), so the summary counts it.
//!
//! Invariants:
//! - Until the pager is published the program's `madvise(MADV_DONTNEED)` calls pass straight to
//!   the kernel; one in flight when the start begins must end before the first page is adopted
//!   (else a page evicted after adoption would keep a copy the program just dropped). The
//!   interposed `madvise` counts itself in [`MADVISING`] while dormant, and the start waits for
//!   zero after it left [`super::DORMANT`] (both sides SeqCst).
//! - No fork copies a half-started pager: the fork's prepare handler waits while a start is in
//!   progress and holds [`LOCK`] across the fork, and a start leaves the dormant state only
//!   under [`LOCK`].
//!
//! Locking: [`LOCK`] (a [`RawLock`]) is held for the dormant → starting step and across a
//! fork; never across the start itself, nor across program memory. The watcher sleeps on the
//! futex word [`WAKE`].

use super::{env, internal, launch, STATE};
use crate::lock::RawLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

/// How long a program call that maps a range of the threshold or more waits for the watcher
/// to start the pager: long enough for a start (a few ms), short enough that a watcher that
/// cannot run (the program holds what it needs) only delays the call.
const URGENT_WAIT_MS: u64 = 200;

/// Held for the dormant → starting step and across `fork` (see the module docs).
static LOCK: RawLock = RawLock::new();
/// The program's `madvise` calls in flight while dormant.
static MADVISING: AtomicI32 = AtomicI32::new(0);
/// The watcher's futex word: bumped to wake it before its period ends.
static WAKE: AtomicU32 = AtomicU32::new(0);
/// Set by a program call that mapped a range of the threshold or more: start now.
static URGENT: AtomicBool = AtomicBool::new(false);
/// The threshold in force, bytes of anonymous resident memory.
static THRESHOLD: AtomicU64 = AtomicU64::new(0);
/// The largest anonymous resident set the watcher saw.
static PEAK_ANON: AtomicU64 = AtomicU64::new(0);
/// The process these statistics are of: set at start-up and in a fork child. A `vfork` child,
/// which runs in its parent's memory and runs no fork handler, finds another pid here.
static OWN_PID: AtomicI32 = AtomicI32::new(0);
/// The watcher was started in this process...
static WATCHER_SPAWNED: AtomicBool = AtomicBool::new(false);
/// ... and has recorded its stack as the pager's own: no pager starts before that.
static WATCHER_RECORDED: AtomicBool = AtomicBool::new(false);

/// The threshold for this process: None when it starts its pager at once (SIGBUS fault mode,
/// `USWAP_START_BYTES=0`, or a variable that does not parse, which the eager start reports).
pub(crate) fn threshold(limit: u64) -> Option<u64> {
    let mode = launch::FAULT_MODE.read(env).ok()?;
    if mode != uswap_pager::FaultMode::Thread {
        return None;
    }
    let t = launch::START_BYTES.read(env).ok()?.min(limit / 8);
    (t > 0).then_some(t)
}

/// Enter the dormant state (from the library's start-up, single-threaded): the watcher runs
/// from now on, and in every fork child.
pub(crate) fn enter(threshold: u64) {
    THRESHOLD.store(threshold, Ordering::Relaxed);
    OWN_PID.store(getpid(), Ordering::Relaxed);
    STATE.store(super::DORMANT, Ordering::SeqCst);
    // SAFETY: registering three extern "C" functions with no arguments. Registered after
    // `fork`'s handlers, this prepare handler runs before theirs: a start in progress ends
    // before they look for a pager.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    spawn_watcher();
}

/// True while the process is dormant.
pub(crate) fn active() -> bool {
    STATE.load(Ordering::SeqCst) == super::DORMANT
}

/// Start the watcher: a pager thread whose stack is never adopted
/// ([`uswap_pager::own::spawn_detached`]; a start waits for [`WATCHER_RECORDED`]). It outlives
/// the start it makes, parked, so that its stack's record stays true.
fn spawn_watcher() {
    let spawned =
        internal(|| uswap_pager::own::spawn_detached("uswap-watch", Some(256 << 10), &WATCHER_RECORDED, watch).is_ok());
    WATCHER_SPAWNED.store(spawned, Ordering::Release);
    if !spawned {
        // No thread to watch with: manage the process from now on.
        start_now();
    }
}

/// Anonymous resident bytes: `statm`'s resident less its shared (file-backed and shmem) pages.
fn anon_resident() -> u64 {
    let (rss, shared) = super::scan::statm();
    rss.saturating_sub(shared)
}

fn watch() {
    const FAST: u64 = 1;
    const SLOW: u64 = 16;
    let mut period = FAST;
    let mut last = 0u64;
    // Snapshots for `uswap status` and `top`, as a started pager's scan thread writes them.
    let every = launch::STATS_INTERVAL_MS.read(env).unwrap_or(0);
    let mut next_snapshot = every;
    let mut waited = 0u64;
    while active() {
        if every > 0 && waited >= next_snapshot {
            super::write_stats(false);
            next_snapshot = waited + every;
        }
        let woken = WAKE.load(Ordering::Acquire);
        let anon = anon_resident();
        PEAK_ANON.fetch_max(anon, Ordering::Relaxed);
        if anon >= THRESHOLD.load(Ordering::Relaxed) || URGENT.swap(false, Ordering::AcqRel) {
            start_now();
            break;
        }
        // Fast while the resident set moves (256 KiB or more since the last look).
        period = if anon.abs_diff(last) >= 256 << 10 { FAST } else { (period * 2).min(SLOW) };
        last = anon;
        futex_wait(&WAKE, woken, period);
        waited += period;
    }
    loop {
        std::thread::park();
    }
}

/// A program call maps, or makes writable, `len` bytes (or `malloc` returned a block of that
/// size): at the threshold or more, the watcher starts the pager now, and the call waits for
/// it (at most [`URGENT_WAIT_MS`]).
pub(crate) fn note_growth(len: usize) {
    if (len as u64) < THRESHOLD.load(Ordering::Relaxed) || !active() || !WATCHER_SPAWNED.load(Ordering::Acquire) {
        return;
    }
    URGENT.store(true, Ordering::Release);
    WAKE.fetch_add(1, Ordering::Release);
    // SAFETY: FUTEX_WAKE on a valid aligned u32 that lives for the process.
    unsafe { libc::syscall(libc::SYS_futex, WAKE.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(URGENT_WAIT_MS);
    while matches!(STATE.load(Ordering::SeqCst), super::DORMANT | super::STARTING)
        && std::time::Instant::now() < deadline
    {
        std::thread::yield_now();
    }
}

/// Sleep on `w` while it holds `val`, at most `ms` milliseconds.
fn futex_wait(w: &AtomicU32, val: u32, ms: u64) {
    let ts = libc::timespec { tv_sec: (ms / 1000) as _, tv_nsec: ((ms % 1000) * 1_000_000) as _ };
    // SAFETY: FUTEX_WAIT on a valid aligned u32 with a relative timeout.
    unsafe { libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, val, &ts) };
}

/// Leave the dormant state and start the pager on the calling thread: the watcher, or, when no
/// watcher could be started, the thread that enters the dormant state (at start-up, or in a
/// fork child's handler).
fn start_now() {
    LOCK.lock();
    let ours = STATE.compare_exchange(super::DORMANT, super::STARTING, Ordering::SeqCst, Ordering::SeqCst).is_ok();
    LOCK.unlock();
    if !ours {
        return;
    }
    while MADVISING.load(Ordering::SeqCst) != 0
        || (WATCHER_SPAWNED.load(Ordering::Acquire) && !WATCHER_RECORDED.load(Ordering::Acquire))
    {
        std::thread::yield_now();
    }
    PEAK_ANON.fetch_max(anon_resident(), Ordering::Relaxed);
    super::boot();
}

/// The program's `madvise` that drops pages: true when it runs dormant (counted until
/// [`madvise_done`]); false when it must take the managed path (the pager is up, or failed),
/// after a start in progress has ended.
pub(crate) fn madvise_begin() -> bool {
    MADVISING.fetch_add(1, Ordering::SeqCst);
    if active() {
        return true;
    }
    MADVISING.fetch_sub(1, Ordering::SeqCst);
    while STATE.load(Ordering::SeqCst) == super::STARTING {
        std::thread::yield_now();
    }
    false
}

/// The end of a dormant `madvise` ([`madvise_begin`] returned true).
pub(crate) fn madvise_done() {
    MADVISING.fetch_sub(1, Ordering::SeqCst);
}

extern "C" fn prepare() {
    LOCK.lock();
    while STATE.load(Ordering::SeqCst) == super::STARTING {
        LOCK.unlock();
        std::thread::yield_now();
        LOCK.lock();
    }
}

extern "C" fn parent() {
    LOCK.unlock();
}

extern "C" fn child() {
    LOCK.force_unlock();
    if active() {
        OWN_PID.store(getpid(), Ordering::Relaxed);
        PEAK_ANON.store(0, Ordering::Relaxed);
        spawn_watcher();
    }
}

/// True when this dormant process writes its statistics at `_exit` (not in a `vfork` child).
pub(crate) fn writes_at_underscore_exit() -> bool {
    active() && getpid() == OWN_PID.load(Ordering::Relaxed)
}

fn getpid() -> i32 {
    // SAFETY: getpid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

/// The statistics record of a dormant process (None once it left the dormant state): what the
/// runner's summary counts.
pub(crate) fn stats_record() -> Option<uswap_pager::record::ProcRecord> {
    if !active() {
        return None;
    }
    PEAK_ANON.fetch_max(anon_resident(), Ordering::Relaxed);
    Some(uswap_pager::record::ProcRecord {
        dormant: true,
        start_bytes: THRESHOLD.load(Ordering::Relaxed),
        anon_peak_bytes: PEAK_ANON.load(Ordering::Relaxed),
        ..Default::default()
    })
}
