//! The event thread: it reads the uffd until the pager stops ([`event_loop`]). In SIGBUS mode
//! it reads only non-cooperative events (munmap, mremap, fork, and madvise if enabled); in
//! [`FaultMode::Thread`](crate::FaultMode) also the page-fault messages, which it resolves
//! ([`try_fault`]) and then wakes the faulting thread.
//!
//! This thread never waits for another thread: other threads may be blocked in the kernel
//! until it reads their event or their fault. An event or a fault it cannot finish now (a page
//! held by another thread, an ioctl refused while an event is pending, the charge over the
//! limit) is kept and retried after the next read, in order: events first, then faults.
//!
//! One turn of the loop: serve the fork child, if any ([`crate::forkserve`]); wait on the uffd
//! (or spin: after a page fault in thread mode it polls without sleeping for a while); read the
//! messages and queue them; decide the round under a fork hold ([`crate::forkhold`]); apply
//! the events; retry the faults. Its state is its own ([`EventLoop`]).
//!
//! What it shares with other threads is [`EventState`], the pager's `ev`: its progress, its
//! quiet flag, the read gate and the stop eventfd. Of the rest of the pager it reads the uffd,
//! the configuration, the stop flag, the placement (`cpu`), the fork hold and the fork
//! service, the store's health, and what [`try_fault`] and [`crate::vma`]'s event handlers
//! touch.
//!
//! Locking: the read gate ([`EventState::read_gate`], held only around the read: reclaim
//! holds it while it drops pages in thread fault mode, so a program's `munmap` stays blocked
//! in the kernel until the drop is done); what [`try_fault`] and the event handlers of
//! [`crate::vma`] take. It publishes its progress ([`EventState`]'s `reads`, `done`,
//! `pending`, `quiet`) with SeqCst for threads that wait for it to catch up and for the fork
//! hold.

use super::throttle::THROTTLE_MAX_NS;
use super::{try_fault, Try};
use crate::cpu::Follower;
use crate::forkhold::{HoldView, Round};
use crate::forkserve::Child;
use crate::stats::{inc, now_ns};
use crate::uffd::{Event, Filled};
use crate::{Pager, PAGE_SIZE};
use linux_raw_sys::general::uffd_msg;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// What the event thread shares with the threads that wait for it (the pager's `ev`): they
/// read its progress, and reclaim takes its read gate.
pub(crate) struct EventState {
    /// Event reads started / fully processed (orders the pager's own madvise REMOVE events
    /// before its evictions publish, when `event_remove` is on).
    pub(crate) reads: AtomicU64,
    pub(crate) done: AtomicU64,
    /// Events read but not yet applied (they wait for a page another thread holds).
    pub(crate) pending: AtomicUsize,
    /// The event thread is not resolving faults (idle in poll, or paused).
    pub(crate) quiet: AtomicBool,
    /// Held by the event thread while it reads messages, and by reclaim while it drops pages
    /// in thread fault mode: a program's `munmap` stays blocked in the kernel (its UNMAP event
    /// unread) while reclaim drops, so its range cannot be mapped again and dropped by mistake.
    pub(crate) read_gate: crate::sys::YieldLock,
    /// An eventfd the event thread polls next to the uffd; written once by `Drop` so the
    /// thread leaves its `poll` at once instead of at its next timeout.
    pub(crate) stop_fd: std::os::fd::OwnedFd,
}

impl EventState {
    /// Nothing read yet, the thread quiet; `stop_fd` its stop eventfd.
    pub(crate) fn new(stop_fd: std::os::fd::OwnedFd) -> EventState {
        EventState {
            reads: AtomicU64::new(0),
            done: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            quiet: AtomicBool::new(true),
            read_gate: crate::sys::YieldLock::new(),
            stop_fd,
        }
    }
}

/// How long the event thread keeps polling after a page fault in thread mode.
const SPIN_NS: u64 = 100_000;
/// How long such a spin keeps the CPU before it yields to any other thread that wants it (a
/// thrashing program's next fault mostly comes early in the spin).
const SPIN_ALONE_NS: u64 = 25_000;

/// Wake-ups a fork hold's round defers to its end, at most (further faults wait for the next
/// round).
const HOLD_WAKES: usize = 256;

thread_local! {
    static EVENT_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True on the thread that reads the uffd.
pub(crate) fn on_event_thread() -> bool {
    EVENT_THREAD.with(|c| c.get())
}

/// A fault message not resolved yet.
#[derive(Copy, Clone)]
struct PendingFault {
    addr: usize,
    write: bool,
    wp: bool,
    since: u64,
    /// The faulting thread (0 when the kernel does not say).
    tid: u32,
}

/// What the wait before a read ended with.
enum Woken {
    /// Read the uffd.
    Read,
    /// Nothing to read (a timeout, the stop eventfd): start the next turn.
    Again,
    /// The uffd is closed: the thread ends.
    Closed,
}

/// The event thread's state: what it read and has not finished, its spin, its view of a fork
/// hold, and the fork child it serves.
struct EventLoop<'p> {
    p: &'p Pager,
    msgs: [uffd_msg; 64],
    /// Fault messages not resolved yet, in the order read.
    faults: Vec<PendingFault>,
    /// Events not applied yet, in order.
    events: VecDeque<Event>,
    stop_fd: i32,
    /// How long a spin lasts (0: never spin, SIGBUS mode).
    spin_ns: u64,
    /// When the current spin ends (0: not spinning).
    spin_until: u64,
    /// This thread's preemptions when its current spin began (see [`EventLoop::spin_idle`]).
    spin_preempted: u64,
    follow: Follower,
    hold_view: HoldView,
    /// Threads to wake at the end of a fork hold's round (their fault addresses).
    hold_wakes: Vec<usize>,
    /// A fork child served from our state until its own pager runs (`forkserve`).
    child: Option<Child<'p>>,
}

/// Read the uffd until the pager stops: events always, page faults in thread mode.
///
/// This thread never waits for another thread: other threads may be blocked in the kernel
/// until it reads their event (munmap, mremap, madvise, fork) or their fault. An event or a
/// fault it cannot finish now (a page held by another thread, an ioctl refused while an
/// event is pending, the charge over the limit) is kept and retried after the next read, in
/// order: events first, then faults.
pub(crate) fn event_loop(p: &Pager) {
    // Per-thread engine state made here, not on this thread's first fault.
    uswap::prepare_thread();
    EVENT_THREAD.with(|c| c.set(true));
    crate::uffd::NOWAIT.with(|c| c.set(true));
    let mut el = EventLoop::new(p);
    while !p.stop.load(Ordering::Acquire) {
        // This thread's thread vector stays pinned where glibc keeps it (`own`).
        crate::own::pin_thread_vector();
        el.serve_child();
        match el.wait() {
            Woken::Read => {}
            Woken::Again => continue,
            Woken::Closed => break,
        }
        el.turn();
    }
}

impl<'p> EventLoop<'p> {
    fn new(p: &'p Pager) -> EventLoop<'p> {
        EventLoop {
            p,
            msgs: [crate::uffd::empty_msg(); 64],
            faults: Vec::with_capacity(1024),
            events: VecDeque::with_capacity(64),
            stop_fd: std::os::fd::AsRawFd::as_raw_fd(&p.ev.stop_fd),
            // In thread mode, after a page fault the thread polls the uffd without sleeping for
            // a while: the next fault of a thrashing program then finds it awake, which saves
            // the wake-up of an idle vCPU on every fault. Not while several program threads
            // fault (`take_msgs`): then no vCPU is idle, and the polling takes one from them.
            spin_ns: if p.cfg.fault_mode == crate::FaultMode::Thread { SPIN_NS } else { 0 },
            spin_until: 0,
            spin_preempted: 0,
            follow: Follower::new(&p.place),
            hold_view: HoldView::default(),
            hold_wakes: Vec::with_capacity(HOLD_WAKES),
            child: None,
        }
    }

    /// Serve the fork child, if any, one step; end the service once the child runs its own
    /// pager (dropping it closes the descriptor: the child registers its own uffd).
    fn serve_child(&mut self) {
        if let Some(c) = &mut self.child {
            if c.step(self.p, &mut self.msgs) {
                self.child = None;
            } else {
                self.spin_until = 0;
            }
        }
    }

    /// Wait until there is something to read, unless a spin is on (then read at once).
    ///
    /// The uffd is non-blocking: the thread only ever waits here, on the uffd and on the stop
    /// eventfd that `Pager::drop` writes, so teardown never waits for a timeout or a fault that
    /// will not come. With work pending it wakes every 100 µs to retry; while it serves a fork
    /// child, also on the eventfd the child writes when it takes over (and every millisecond).
    fn wait(&mut self) -> Woken {
        let p = self.p;
        let pending = !self.faults.is_empty() || !self.events.is_empty();
        if self.spin_until != 0 && now_ns() <= self.spin_until {
            p.ev.quiet.store(false, Ordering::SeqCst);
            return Woken::Read;
        }
        self.spin_until = 0;
        let mut pfd = [
            libc::pollfd { fd: p.uffd.raw(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: self.stop_fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: self.child.as_ref().map_or(-1, |c| c.raw()), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: p.fork_serve.wake_fd(), events: libc::POLLIN, revents: 0 },
        ];
        p.ev.quiet.store(true, Ordering::SeqCst);
        if self.child.is_some() {
            let ts = libc::timespec { tv_sec: 0, tv_nsec: if pending { 100_000 } else { 1_000_000 } };
            // SAFETY: four valid pollfds (a negative fd is ignored) and a valid timeout.
            unsafe { libc::ppoll(pfd.as_mut_ptr(), 4, &ts, std::ptr::null()) };
        } else if pending {
            // Faults held while the store fails wait for the reclaimer's next retry (every
            // 20 ms): no need to look a hundred times as often.
            let ns = if p.health.failing() { 2_000_000 } else { 100_000 };
            let ts = libc::timespec { tv_sec: 0, tv_nsec: ns };
            // SAFETY: two valid pollfds and a valid timeout.
            unsafe { libc::ppoll(pfd.as_mut_ptr(), 2, &ts, std::ptr::null()) };
        } else {
            // SAFETY: two valid pollfds.
            let n = unsafe { libc::poll(pfd.as_mut_ptr(), 2, -1) };
            if n <= 0 || pfd[1].revents != 0 || pfd[0].revents & libc::POLLIN == 0 {
                if pfd[0].revents & libc::POLLNVAL != 0 {
                    return Woken::Closed;
                }
                return Woken::Again;
            }
        }
        p.ev.quiet.store(false, Ordering::SeqCst);
        if pfd[1].revents != 0 {
            return Woken::Again;
        }
        Woken::Read
    }

    /// One turn after the wait: read and queue the messages, then (unless a fork hold keeps
    /// this round waiting) apply the events and retry the faults.
    fn turn(&mut self) {
        let p = self.p;
        // A fork hold in force (checked after `ev.quiet` is false: `ForkHold::begin`).
        let mut hold_tid = p.hold.check(&mut self.hold_view);
        let hold_gen = hold_tid.map(|_| p.hold.generation());
        let seq = p.ev.reads.fetch_add(1, Ordering::SeqCst) + 1;
        let n = {
            let _g = p.ev.read_gate.lock();
            p.uffd.read_msgs(&mut self.msgs).unwrap_or(0)
        };
        if n == 0 {
            self.spin_idle();
        }
        self.take_msgs(n, &mut hold_tid, hold_gen);
        let Some(held) = self.hold_round(hold_tid) else {
            p.ev.pending.store(self.events.len(), Ordering::SeqCst);
            p.ev.done.store(seq, Ordering::SeqCst);
            return;
        };
        if held {
            p.hold.set_busy(true);
        }
        self.apply_events();
        p.ev.pending.store(self.events.len(), Ordering::SeqCst);
        if !self.faults.is_empty() {
            self.retry_faults(held);
        }
        if held {
            // Nothing is in flight from here: a `clone` may copy us now.
            p.hold.set_busy(false);
            for a in self.hold_wakes.drain(..) {
                let _ = p.uffd.wake(a, PAGE_SIZE);
            }
        }
        p.ev.done.store(seq, Ordering::SeqCst);
    }

    /// A read during a spin found nothing. A spin gives way to other threads: once it has found
    /// nothing for a while it yields the CPU on every empty read, and a spin that was preempted
    /// or gave way and finds nothing on resuming is over: another thread wanted this CPU (the
    /// program, runnable for a reason other than a fault, or another process), and polling on
    /// would take CPU time from it rather than from an idle CPU. (A switch that ends in a fault
    /// is the hand-off working: the program ran, here, until it faulted again.)
    fn spin_idle(&mut self) {
        if self.spin_until == 0 {
            return;
        }
        if crate::cpu::preemptions() != self.spin_preempted {
            self.spin_until = 0;
        } else if now_ns() + self.spin_ns > self.spin_until + SPIN_ALONE_NS {
            // SAFETY: sched_yield has no arguments and cannot fail.
            unsafe { libc::syscall(libc::SYS_sched_yield) };
        }
    }

    /// Queue the `n` messages read: faults (starting a spin), and events; a fork event ends the
    /// hold (`hold_tid` becomes `None`) and starts serving the child (`hold_gen`: the hold's
    /// generation, if one was in force).
    fn take_msgs(&mut self, n: usize, hold_tid: &mut Option<i32>, hold_gen: Option<u64>) {
        let p = self.p;
        let mut spin_began = false;
        for m in &self.msgs[..n] {
            match crate::uffd::decode(m) {
                Event::Pagefault { addr, write, wp, tid } => {
                    let now = now_ns();
                    self.follow.on_fault(&p.place, tid, now);
                    // Not while several threads fault: they keep the CPUs busy, and polling
                    // would take one from them.
                    if self.spin_ns > 0 && !self.follow.several_threads_fault() {
                        self.spin_until = now + self.spin_ns;
                        spin_began = true;
                    }
                    if wp {
                        inc(&p.counters.fault_wp, 1);
                    }
                    let a = addr as usize & !(PAGE_SIZE - 1);
                    self.faults.push(PendingFault { addr: a, write, wp, since: 0, tid });
                }
                Event::Fork { uffd } => {
                    inc(&p.counters.ev_fork, 1);
                    // The copy is complete: the hold is over.
                    p.hold.forked(&mut self.hold_view);
                    *hold_tid = None;
                    // The child's copy of the pager registers its regions on a uffd of its own
                    // (the LD_PRELOAD library's atfork handler, `Pager::restart_in_fork_child`);
                    // until then this descriptor holds its registrations, and its faults are
                    // served from our state (`forkserve`), which must not change meanwhile. A
                    // fork no atfork handler held for (a raw `clone`), or a second one, is
                    // let go at once: closing it unregisters the child's copies.
                    if self.child.is_none() {
                        self.child = Child::begin(p, uffd, hold_gen);
                    } else {
                        // SAFETY: the kernel gave us this fd.
                        unsafe { libc::close(uffd) };
                    }
                }
                ev @ Event::Remap { .. } => {
                    inc(&p.counters.ev_remap, 1);
                    self.events.push_back(ev);
                }
                ev @ Event::Remove { .. } => {
                    inc(&p.counters.ev_remove, 1);
                    self.events.push_back(ev);
                }
                ev @ Event::Unmap { .. } => {
                    inc(&p.counters.ev_unmap, 1);
                    self.events.push_back(ev);
                }
                Event::Unknown(_) => {}
            }
        }
        // The spin's baseline: one system call per read, not per fault message, and before
        // the faults are served (a switch during their ioctls counts against the spin).
        if spin_began {
            self.spin_preempted = crate::cpu::preemptions();
        }
    }

    /// This round under a fork hold: `None` when it must leave events and faults queued, else
    /// whether a hold is in force (`Some(true)`: work while the forking thread cannot be in
    /// `clone`, and wake nobody before the round's work is done).
    fn hold_round(&mut self, hold_tid: Option<i32>) -> Option<bool> {
        let p = self.p;
        let its_fault = hold_tid.is_some_and(|t| self.faults.iter().any(|f| f.tid as i32 == t));
        let pending = !self.faults.is_empty() || !self.events.is_empty();
        let (mut round, mut first_forced) = p.hold.round(&mut self.hold_view, hold_tid, its_fault, pending);
        if self.child.is_some() {
            // Serving a fork child: our state stays what its copy is.
            (round, first_forced) = (Round::Wait, false);
        }
        if round == Round::Wait {
            return None;
        }
        if first_forced {
            inc(&p.counters.fork_hold_forced, 1);
        }
        Some(round != Round::Free)
    }

    /// Apply the queued events in order; stop at the first that must wait (later ones may
    /// depend on it).
    fn apply_events(&mut self) {
        let p = self.p;
        while let Some(&ev) = self.events.front() {
            let done = match ev {
                Event::Remap { from, to, len } => crate::vma::remap(p, from as usize, to as usize, len as usize),
                Event::Remove { start, end } => crate::vma::release(p, start as usize, end as usize, false),
                Event::Unmap { start, end } => crate::vma::release(p, start as usize, end as usize, true),
                _ => true,
            };
            if !done {
                break;
            }
            self.events.pop_front();
        }
    }

    /// Retry the queued faults; keep those that cannot finish now. `held`: a fork hold's round
    /// (faults are mapped over the limit, and their wake-ups wait for the round's end).
    fn retry_faults(&mut self, held: bool) {
        let p = self.p;
        let EventLoop { faults, events, hold_wakes, .. } = self;
        let now = now_ns();
        let remap_pending = events.iter().any(|e| matches!(e, Event::Remap { .. }));
        faults.retain_mut(|f| {
            if f.since == 0 {
                f.since = now;
            }
            if held && hold_wakes.len() == HOLD_WAKES {
                return true;
            }
            // A hold's round maps over the limit: the reclaimer is paused for the fork. While
            // the store fails, a fault waits longer for room (`stall`).
            let force = (now - f.since > THROTTLE_MAX_NS && !p.health.holds_faults(now, p.cfg.full_wait_ms)) || held;
            let done = match try_fault(p, f.addr, f.write, f.wp, force, !held) {
                Try::Done => {
                    inc(&p.counters.fault_held_ns, now - f.since);
                    true
                }
                Try::Retry => false,
                // Registered memory no region knows: its pages were never evicted (every
                // evicted page has a word), so a missing page reads as zero. While a remap
                // is pending the address may be where moved pages are about to arrive.
                Try::NotOurs if remap_pending => false,
                Try::NotOurs => serve_unowned(p, f.addr, !held),
            };
            if done && held {
                hold_wakes.push(f.addr);
            }
            !done
        });
    }
}

/// A fault on registered memory that no region holds (grown by `mremap` in place, or not
/// adopted yet): zero-fill a missing page, or lift a stale write protection, and wake the
/// thread. Returns false to retry later (an event is pending).
fn serve_unowned(p: &Pager, addr: usize, wake: bool) -> bool {
    inc(&p.counters.fault_unowned, 1);
    crate::uffd::AGAIN.with(|c| c.set(false));
    let ok = match p.uffd.zeropage(addr, PAGE_SIZE, wake) {
        Ok(Filled::Done) => true,
        Ok(Filled::Exists) => p.uffd.writeprotect(addr, PAGE_SIZE, false, wake).is_ok(),
        Err(_) => false,
    };
    if crate::uffd::AGAIN.with(|c| c.replace(false)) {
        return false;
    }
    if !ok && wake {
        // Unmapped meanwhile, or not ours at all: wake the thread so it sees what is there
        // (during a fork hold the round's end does).
        let _ = p.uffd.wake(addr, PAGE_SIZE);
    }
    true
}
