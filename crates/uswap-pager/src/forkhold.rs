//! The fork hold: no pager work in flight when `fork` copies the address space.
//!
//! `fork` gives the child a copy-on-write snapshot of the whole process, the pager's state
//! included, taken at one instant of the forking thread's `clone`. The child has none of the
//! other threads, so an operation the event thread had in flight at that instant stays in
//! flight in the child forever: a cluster lock, a pool class lock, a claimed page. The
//! child's first `put` or swap-in then waits for a lock nobody will release (rustc forking
//! its linker; the e2e test `fork_while_other_threads_fault` in
//! `crates/uswap-cli/tests/run_e2e.rs`: a program forking while three threads fault).
//!
//! The background threads stop for a fork ([`crate::Pager::quiesce`]); the event thread
//! cannot. The forking thread still runs glibc's own fork preparation after the last atfork
//! handler: it locks every malloc arena, and a program thread that holds an arena lock may be
//! waiting for a fault that only the event thread serves. (Stopping the event thread outright
//! would deadlock that way.) So from the end of the prepare handler ([`ForkHold::begin`]) the
//! event thread *holds*: it reads the uffd as always, but does pager work only while the
//! forking thread cannot be in `clone`. The hold ends when it reads the fork's
//! `UFFD_EVENT_FORK` (the kernel sends it once the copy is complete), or when the parent
//! handler ends it ([`ForkHold::end`]: the fork failed, no event comes).
//!
//! While holding, the event thread works in two cases:
//! - **The forking thread waits for one of its own faults.** It cannot reach `clone` before
//!   it is woken. The event thread does all its queued work (events, then every fault), with
//!   every wake-up deferred to the end, the forking thread's included. By then nothing is in
//!   flight.
//! - **The forking thread has slept for [`FORCE_AFTER_NS`] while work is pending** (no run
//!   time gained, and asleep in the kernel: not merely waiting for a CPU). It
//!   waits for a lock, and the holder may be a thread that waits for a fault (an arena lock
//!   taken by a thread that faulted inside `malloc`). The work is done anyway
//!   (`fork_hold_forced`). If something else wakes the forking thread meanwhile and its
//!   `clone` lands on that work, the child finds [`ForkHold::busy`] set in its copy and exits
//!   with a message ([`ForkHold::reset_in_fork_child`]) instead of running on state cut in
//!   half.
//!
//! Otherwise faults and events wait in the event thread's queues (at most one fault per
//! program thread: each waits for its own).
//!
//! Locking: atomics only. [`ForkHold::begin`] publishes the hold and then waits for the event
//! thread's acknowledgement, or for its idle poll (`ev.quiet`). Both sides use SeqCst, as in
//! Dekker's algorithm: a thread leaving its poll stores `ev.quiet = false` before it looks for
//! a hold. Only the event thread reads the forking thread's schedstat.

use crate::stats::now_ns;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// How long the forking thread must stay off the CPU, with work pending, before the event
/// thread works during the hold anyway. A running thread holds any lock glibc's fork takes
/// for microseconds (even when preempted on a busy machine, for a few milliseconds), so after
/// this long the holder is almost surely waiting for us.
pub(crate) const FORCE_AFTER_NS: u64 = 20_000_000;

/// How long [`ForkHold::begin`] waits for the event thread before it lets the fork go ahead.
const ACK_TIMEOUT_NS: u64 = 10_000_000_000;

/// One pager's fork hold (see the module documentation).
pub(crate) struct ForkHold {
    /// The forking thread's id while a hold is on; 0 when none is.
    tid: AtomicI32,
    /// Bumped by every [`ForkHold::begin`].
    gen: AtomicU64,
    /// The last hold generation the event thread has seen (no work of its was in flight then).
    ack: AtomicU64,
    /// The event thread is doing work during a hold.
    busy: AtomicBool,
    /// `/proc/thread-self/schedstat` of the forking thread, opened by it; -1 when none.
    sched_fd: AtomicI32,
    /// `/proc/thread-self/wchan` of the forking thread, likewise.
    wchan_fd: AtomicI32,
}

/// The event thread's own view of the holds (kept on its stack).
#[derive(Default)]
pub(crate) struct HoldView {
    /// The hold generation whose fork event it has read.
    forked: u64,
    /// The generation the fields below belong to.
    gen: u64,
    /// The forking thread's run time when last read, and since when it has not changed.
    ran_ns: u64,
    still_since: u64,
    /// This generation's work was forced once already (counted once).
    forced: bool,
}

/// What the event thread may do in this round.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Round {
    /// No hold: work as always.
    Free,
    /// Holding, and nothing allows work: leave events and faults queued.
    Wait,
    /// Holding, and working (the forking thread waits for a fault, or [`FORCE_AFTER_NS`]
    /// passed): every wake-up waits for the end of the round. `forced`: the second case.
    Work {
        /// The forking thread was not waiting for a fault.
        forced: bool,
    },
}

impl Default for ForkHold {
    fn default() -> Self {
        ForkHold {
            tid: AtomicI32::new(0),
            gen: AtomicU64::new(0),
            ack: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            sched_fd: AtomicI32::new(-1),
            wchan_fd: AtomicI32::new(-1),
        }
    }
}

impl ForkHold {
    /// Begin a hold: called by the forking thread at the end of its prepare handler, after
    /// the background threads went quiet. Waits until the event thread has acknowledged (it is
    /// between two rounds, or idle in its poll). False if it did not within ten seconds (the
    /// fork goes ahead; the caller warns).
    pub(crate) fn begin(&self, ev_quiet: &AtomicBool) -> bool {
        let fd = crate::sys::open_raw(c"/proc/thread-self/schedstat").unwrap_or(-1);
        close(self.sched_fd.swap(fd, Ordering::SeqCst));
        let fd = crate::sys::open_raw(c"/proc/thread-self/wchan").unwrap_or(-1);
        close(self.wchan_fd.swap(fd, Ordering::SeqCst));
        let gen = self.gen.fetch_add(1, Ordering::SeqCst) + 1;
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        self.tid.store(tid, Ordering::SeqCst);
        let t0 = now_ns();
        let mut backoff = crate::sys::Backoff::default();
        while self.ack.load(Ordering::SeqCst) != gen && !ev_quiet.load(Ordering::SeqCst) {
            if now_ns() - t0 > ACK_TIMEOUT_NS {
                return false;
            }
            backoff.snooze();
        }
        true
    }

    /// End the hold (the parent's atfork handler: the fork is over, whether it succeeded).
    pub(crate) fn end(&self) {
        self.tid.store(0, Ordering::SeqCst);
        self.close_fds();
    }

    /// The hold of generation `gen` is over: the parent's handler ended it, or a later hold began.
    pub(crate) fn ended(&self, gen: u64) -> bool {
        self.tid.load(Ordering::SeqCst) == 0 || self.gen.load(Ordering::SeqCst) != gen
    }

    /// The generation of the last hold begun (in a fork child: the one its fork was taken in).
    pub(crate) fn generation(&self) -> u64 {
        self.gen.load(Ordering::SeqCst)
    }

    /// Close the forking thread's procfs descriptors.
    fn close_fds(&self) {
        close(self.sched_fd.swap(-1, Ordering::SeqCst));
        close(self.wchan_fd.swap(-1, Ordering::SeqCst));
    }

    /// The event thread, between rounds, right after it marked itself busy (`ev.quiet`
    /// false): acknowledge a hold in force and return the forking thread's id, or None.
    pub(crate) fn check(&self, view: &mut HoldView) -> Option<i32> {
        let tid = self.tid.load(Ordering::SeqCst);
        if tid == 0 {
            return None;
        }
        let gen = self.gen.load(Ordering::SeqCst);
        self.ack.store(gen, Ordering::SeqCst);
        if view.gen != gen {
            *view = HoldView { forked: view.forked, gen, ran_ns: u64::MAX, still_since: now_ns(), forced: false };
        }
        (view.forked != gen).then_some(tid)
    }

    /// The event thread read a fork event: the copy is complete, the hold is over for it.
    pub(crate) fn forked(&self, view: &mut HoldView) {
        view.forked = self.gen.load(Ordering::SeqCst);
    }

    /// Decide this round. `tid`: the forking thread ([`ForkHold::check`]); `its_fault`: one of
    /// its faults is queued; `pending`: any work is queued. Returns the round, and whether it
    /// is the generation's first forced one (for the statistic).
    ///
    /// A queued fault alone does not show that the forking thread waits: the message may be
    /// an old one, read before another fill woke the thread by mapping its page. So the
    /// thread must also be in the kernel's `handle_userfault` (its `wchan`). Nothing else
    /// wakes it from there during the hold: every wake-up of the event thread's round is
    /// deferred to its end.
    pub(crate) fn round(&self, view: &mut HoldView, tid: Option<i32>, its_fault: bool, pending: bool) -> (Round, bool) {
        if tid.is_none() || view.forked == view.gen {
            return (Round::Free, false);
        }
        if its_fault && self.in_uffd_fault() {
            return (Round::Work { forced: false }, false);
        }
        if !pending {
            return (Round::Wait, false);
        }
        let now = now_ns();
        let ran = self.ran_ns();
        // Unreadable (u64::MAX): the time since the hold began decides alone. A thread that
        // is runnable (waiting for a CPU, `wchan` 0) counts as running: it is not blocked on
        // anything, and may be in `clone` the moment it gets a CPU.
        if (ran != view.ran_ns && ran != u64::MAX) || !self.asleep() {
            view.ran_ns = ran;
            view.still_since = now;
        }
        if now - view.still_since < FORCE_AFTER_NS {
            return (Round::Wait, false);
        }
        let first = !view.forced;
        view.forced = true;
        (Round::Work { forced: true }, first)
    }

    /// Mark the event thread's work during a hold (set before its first step, cleared before
    /// its first wake-up).
    pub(crate) fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::SeqCst);
    }

    /// In a fork child, before its threads start: no hold is in force here, and the parent's
    /// schedstat descriptor is closed. Err when the copy was taken while the parent's event
    /// thread worked during a forced hold: the child's pager state may be cut in half.
    pub(crate) fn reset_in_fork_child(&self) -> Result<(), String> {
        let busy = self.busy.swap(false, Ordering::SeqCst);
        self.tid.store(0, Ordering::SeqCst);
        self.close_fds();
        if busy {
            return Err(format!(
                "the fork copied the pager while it worked for a thread the forking thread may \
                 have waited on (it had been off the CPU for over {} ms); the child's swap state \
                 may be half-changed",
                FORCE_AFTER_NS / 1_000_000
            ));
        }
        Ok(())
    }

    /// Whether the forking thread is blocked in a userfaultfd fault (its `wchan`).
    fn in_uffd_fault(&self) -> bool {
        let mut buf = [0u8; 64];
        read_start(&self.wchan_fd, &mut buf).starts_with(b"handle_userfault")
    }

    /// Whether the forking thread sleeps in the kernel (its `wchan` names where), as a thread
    /// waiting for a lock does. The kernel shows 0 for a thread that runs or waits for a CPU:
    /// on a loaded machine a runnable thread can wait [`FORCE_AFTER_NS`] for one, and a round
    /// forced then could be caught by its `clone` (the child would exit with the message of
    /// [`ForkHold::reset_in_fork_child`]). True when `wchan` cannot be read (the time alone
    /// decides).
    fn asleep(&self) -> bool {
        let mut buf = [0u8; 64];
        let w = read_start(&self.wchan_fd, &mut buf);
        w.strip_suffix(b"\n").unwrap_or(w) != b"0"
    }

    /// The forking thread's run time in ns (the first field of its schedstat), or u64::MAX
    /// when it cannot be read.
    fn ran_ns(&self) -> u64 {
        let mut buf = [0u8; 64];
        let text = read_start(&self.sched_fd, &mut buf);
        let digits = text.iter().position(|b| !b.is_ascii_digit()).unwrap_or(text.len());
        std::str::from_utf8(&text[..digits]).ok().and_then(|d| d.parse().ok()).unwrap_or(u64::MAX)
    }
}

/// The start of the procfs file open on `fd` (a raw `pread`: the preload interposes nothing on
/// the event thread's path), in `buf`; empty when there is none or the read fails.
fn read_start<'b>(fd: &AtomicI32, buf: &'b mut [u8]) -> &'b [u8] {
    let fd = fd.load(Ordering::SeqCst);
    if fd < 0 {
        return &[];
    }
    // SAFETY: pread into our own buffer of its length.
    let n = unsafe { libc::syscall(libc::SYS_pread64, fd, buf.as_mut_ptr(), buf.len(), 0i64) };
    let n = usize::try_from(n).unwrap_or(0).min(buf.len());
    &buf[..n]
}

fn close(fd: i32) {
    if fd >= 0 {
        // SAFETY: a descriptor this module opened and no longer uses.
        unsafe { libc::syscall(libc::SYS_close, fd) };
    }
}
